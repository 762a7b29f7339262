package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/testutil"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// countingListener counts the connections it accepts, and signals each on accepted.
type countingListener struct {
	net.Listener
	n        atomic.Int64
	accepted chan struct{}
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
		select {
		case l.accepted <- struct{}{}:
		default:
		}
	}
	return c, err
}

// receiver is an HTTP server on a loopback port, on 127.0.0.1 and, where the machine has IPv6,
// on [::1] at the same port, counting the connections both accept and the requests they serve.
type receiver struct {
	port      int
	listeners []*countingListener
	hits      atomic.Int64
	v6        bool
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc.port = l4.Addr().(*net.TCPAddr).Port
	lns := []net.Listener{l4}
	if l6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(rc.port))); err == nil {
		lns = append(lns, l6)
		rc.v6 = true
	} else {
		t.Logf("no [::1]:%d listener (%v): the IPv6 forms are checked against the 127.0.0.1 receiver only", rc.port, err)
	}
	for _, l := range lns {
		cl := &countingListener{Listener: l, accepted: make(chan struct{}, 1)}
		rc.listeners = append(rc.listeners, cl)
		go srv.Serve(cl)
	}
	t.Cleanup(func() { srv.Close() })
	return rc
}

func (rc *receiver) connections() (n int64) {
	for _, l := range rc.listeners {
		n += l.n.Load()
	}
	return n
}

func loopbackDNS() *testutil.DNS {
	return testutil.NewDNS(map[string][]string{
		"loopback.test": {"127.0.0.1", "::1"},
		"v4only.test":   {"127.0.0.1"},
		"localhost":     {"127.0.0.1", "::1"},
		"mapped.test":   {"::ffff:127.0.0.1"},
	})
}

// The forgery matrix: with loopback not allowed, every url that means the loopback receiver is
// refused, and the receiver sees no connection at all. The same client allowing loopback reaches
// it through the same names, so the refusals are the rule's and not a resolution failure.
func TestForgeryMatrix(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	dns := loopbackDNS()
	strict := New(Config{Key: testKey(t), Resolver: dns.Resolver(), Timeout: 5 * time.Second})
	p := strconv.Itoa(rc.port)
	hosts := []struct{ host, says string }{
		{"0.0.0.0", "0.0.0.0 is the unspecified address"},
		{"127.1", "127.1 is 127.0.0.1, a non-standard numeric form of a loopback address"},
		{"2130706433", "2130706433 is 127.0.0.1, a non-standard numeric form of a loopback address"},
		{"0x7f.1", "non-standard numeric form of a loopback address"},
		{"0177.0.0.1", "non-standard numeric form of a loopback address"},
		{"[::ffff:127.0.0.1]", "IPv4-mapped form of a loopback address"},
		{"[::ffff:7f00:1]", "IPv4-mapped form of a loopback address"},
		{"[::]", ":: is the unspecified address"},
		{"[::1]", "::1 is a loopback address"},
		{"[::127.0.0.1]", "IPv4-compatible"},
		{"127.0.0.1", "127.0.0.1 is a loopback address"},
		{"127.0.0.2", "127.0.0.2 is a loopback address"},
		{"localhost", "localhost resolves to a loopback address"},
		{"LOCALHOST", "LOCALHOST resolves to a loopback address"},
		{"localhost.", "localhost. resolves to a loopback address"},
		{"loopback.test", "loopback.test resolves to a loopback address"},
		{"v4only.test", "v4only.test resolves to a loopback address"},
		{"mapped.test", "mapped.test resolves to a loopback address"},
	}
	for _, h := range hosts {
		res := strict.Deliver(t.Context(), Request{ID: "msg_forgery", URL: "http://" + h.host + ":" + p + "/hook", Payload: []byte(`{}`)})
		if res.Outcome != Refused || res.Status != 0 {
			t.Errorf("%s: %v %d %q, want refused", h.host, res.Outcome, res.Status, res.Message)
			continue
		}
		if !strings.HasPrefix(res.Message, "refused: ") || !strings.Contains(res.Message, h.says) {
			t.Errorf("%s: the message %q does not say %q", h.host, res.Message, h.says)
		}
		// A name's refusal says what it resolves to, not the address (the deliverers' resolver's
		// answer, internal on AWS).
		if strings.Contains(h.says, " resolves to ") && (strings.Contains(res.Message, "127.0.0.1") || strings.Contains(res.Message, "::1")) {
			t.Errorf("%s: the message %q names the address the name resolved to", h.host, res.Message)
		}
	}
	if n := rc.connections(); n != 0 {
		t.Fatalf("the loopback receiver accepted %d connections from refused deliveries", n)
	}
	if rc.hits.Load() != 0 {
		t.Fatal("the loopback receiver served a refused delivery")
	}
	for _, name := range dns.Names() {
		if name == "127.1." || name == "2130706433." || name == "0x7f.1." || name == "0177.0.0.1." {
			t.Errorf("the numeric host %s was sent to DNS", name)
		}
	}

	// The controls. The counting listener counts: a plain connection is seen.
	c, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", p))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-rc.listeners[0].accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver's listener did not count a plain connection")
	}
	// With loopback allowed, the names reach the receiver: the fake resolver was used, and the
	// refusals above were the rule's.
	loose := New(Config{Key: testKey(t), Resolver: dns.Resolver(), AllowLoopback: true, Timeout: 5 * time.Second})
	allowed := []string{"127.0.0.1", "loopback.test", "v4only.test", "localhost", "[::ffff:127.0.0.1]", "mapped.test"}
	if rc.v6 {
		allowed = append(allowed, "[::1]")
	}
	for _, h := range allowed {
		res := loose.Deliver(t.Context(), Request{ID: "msg_allowed", URL: "http://" + h + ":" + p + "/hook", Payload: []byte(`{}`)})
		if res.Outcome != Delivered || res.Status != http.StatusNoContent {
			t.Errorf("%s with loopback allowed: %v %d %q, want delivered", h, res.Outcome, res.Status, res.Message)
		}
	}
	if got := rc.hits.Load(); got != int64(len(allowed)) {
		t.Fatalf("the receiver served %d deliveries, want %d", got, len(allowed))
	}
	// Still refused with loopback allowed: not loopback.
	for _, h := range []string{"0.0.0.0", "[::]", "[::127.0.0.1]", "169.254.169.254", "[fe80::1%25lo]", "100.64.0.1"} {
		if res := loose.Deliver(t.Context(), Request{ID: "m", URL: "http://" + h + ":" + p + "/"}); res.Outcome != Refused {
			t.Errorf("%s with loopback allowed: %v %q, want refused", h, res.Outcome, res.Message)
		}
	}
}

// delivery is one request a test receiver saw.
type delivery struct {
	header http.Header
	body   []byte
}

// The delivered request: a POST of the exact payload with the headers, its signature verified by
// the Standard Webhooks library; the same id on every attempt.
func TestDeliveredRequest(t *testing.T) {
	t.Parallel()
	got := make(chan delivery, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/hooks/a" || r.URL.RawQuery != "x=1" {
			w.WriteHeader(http.StatusTeapot)
		}
		got <- delivery{r.Header.Clone(), body}
	}))
	t.Cleanup(srv.Close)
	c := New(Config{Key: testKey(t), AllowLoopback: true})
	payload := []byte(`{"order": 17, "note": "é ü", "nested": {"a": [1, 2.50, null]}}` + "\n")
	for attempt := range 2 {
		before := time.Now()
		res := c.Deliver(t.Context(), Request{ID: "task_42", URL: srv.URL + "/hooks/a?x=1", Payload: payload})
		if res.Outcome != Delivered || res.Status != 200 || res.Message != "" {
			t.Fatalf("attempt %d: %+v", attempt, res)
		}
		if res.Started.Before(before) || res.Duration <= 0 || res.Duration > 5*time.Second {
			t.Fatalf("attempt %d: started %s, took %s", attempt, res.Started, res.Duration)
		}
		d := <-got
		if string(d.body) != string(payload) {
			t.Fatalf("body %q, want exactly %q", d.body, payload)
		}
		for k, want := range map[string]string{"Content-Type": "application/json", "User-Agent": "exactlyonce-webhook/" + Version,
			"Webhook-Id": "task_42"} {
			if v := d.header.Get(k); v != want {
				t.Errorf("%s: %q, want %q", k, v, want)
			}
		}
		ts, err := strconv.ParseInt(d.header.Get(HeaderTimestamp), 10, 64)
		if err != nil || ts < before.Unix() || ts > time.Now().Unix() {
			t.Errorf("webhook-timestamp %q is not the unix time of the attempt", d.header.Get(HeaderTimestamp))
		}
		if !strings.HasPrefix(d.header.Get(HeaderSignature), "v1,") {
			t.Errorf("webhook-signature %q", d.header.Get(HeaderSignature))
		}

		// A receiver verifies it with the spec's library (with its timestamp tolerance).
		wh, err := standardwebhooks.NewWebhook(testSecret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(d.body, d.header); err != nil {
			t.Fatalf("the Standard Webhooks library rejects the delivery: %v", err)
		}
		// Tampered: the body, the id, the timestamp; or another key.
		if err := wh.Verify(append([]byte(nil), append(d.body[:len(d.body)-1], ' ')...), d.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
			t.Fatalf("a tampered body verifies: %v", err)
		}
		h := d.header.Clone()
		h.Set(HeaderID, "task_43")
		if err := wh.Verify(d.body, h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
			t.Fatalf("another id verifies: %v", err)
		}
		h = d.header.Clone()
		h.Set(HeaderTimestamp, strconv.FormatInt(ts-1, 10))
		if err := wh.Verify(d.body, h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
			t.Fatalf("another timestamp verifies: %v", err)
		}
		other, _ := standardwebhooks.NewWebhook(base64.StdEncoding.EncodeToString([]byte("another key, 24 bytes...")))
		if err := other.Verify(d.body, d.header); err == nil {
			t.Fatal("another key verifies")
		}
	}

	// A Config's User-Agent replaces the default.
	c = New(Config{Key: testKey(t), AllowLoopback: true, UserAgent: "mine/1"})
	if res := c.Deliver(t.Context(), Request{ID: "t", URL: srv.URL + "/hooks/a?x=1", Payload: []byte("null")}); res.Outcome != Delivered {
		t.Fatal(res)
	}
	if ua := (<-got).header.Get("User-Agent"); ua != "mine/1" {
		t.Fatalf("User-Agent %q", ua)
	}
}

// With every setting on (WEBHOOK_ALLOW_PRIVATE and WEBHOOK_ALLOW_LOOPBACK), a name that resolves to
// a metadata endpoint, in any form, is refused on the address dialled: net.Dialer.Control refuses
// the socket before connect is called, so no packet leaves for it (were it let through, the connect
// would go out, and end in a timeout or an unreachable network: a temporary failure, retried).
// The same client delivers to a loopback receiver through the same resolver, so the refusals are
// the rule's.
func TestMetadataRefusedAtTheDial(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	addrs := []string{
		"169.254.169.254", "::ffff:169.254.169.254", "::a9fe:a9fe", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::",
		"fd00:ec2::254", "fd00:ec2::253", "fd00:ec2::123", "fd20:ce::254",
		"100.100.100.200", "::ffff:100.100.100.200", "192.0.0.192", "169.254.169.123", "169.254.0.1",
		"fe80::a9fe:a9fe", "fe80::1",
		"168.63.129.16", "::ffff:168.63.129.16", "64:ff9b::a83f:8110", "64:ff9b::6464:64c8", "64:ff9b::c000:c0",
	}
	answers := map[string][]string{"receiver.test": {"127.0.0.1"}}
	for i, a := range addrs {
		answers[fmt.Sprintf("meta-%d.test", i)] = []string{a}
	}
	dns := testutil.NewDNS(answers)
	c := New(Config{Key: testKey(t), Resolver: dns.Resolver(), AllowLoopback: true, AllowPrivate: true, Timeout: 5 * time.Second})
	for i, a := range addrs {
		name := fmt.Sprintf("meta-%d.test", i)
		res := c.Deliver(t.Context(), Request{ID: "msg_meta", URL: "http://" + name + "/latest/meta-data/", Payload: []byte(`{}`)})
		dialled := netip.MustParseAddr(a).Unmap()
		rg, _ := classify(dialled)
		// What the name resolves to, not the address: the resolver's answer, internal on AWS.
		want := "refused: " + name + " resolves to " + rg.what + ", which deliveries must not connect to"
		if res.Outcome != Refused || res.Status != 0 || res.Message != want {
			t.Errorf("%s (%s): %v %d %q, want refused at the dial of %s: %q", name, a, res.Outcome, res.Status, res.Message, dialled, want)
		}
		if !strings.Contains(rg.what, dialled.String()) && strings.Contains(res.Message, dialled.String()) {
			t.Errorf("%s (%s): the refusal %q names the address the name resolved to", name, a, res.Message)
		}
		if strings.Contains(res.Message, "WEBHOOK_ALLOW") {
			t.Errorf("%s (%s): the refusal %q says a setting would allow it", name, a, res.Message)
		}
		if !slices.Contains(dns.Names(), name+".") {
			t.Errorf("%s was never resolved: the refusal was not made at the dial", name)
		}
	}
	res := c.Deliver(t.Context(), Request{ID: "msg_control", URL: "http://receiver.test:" + strconv.Itoa(rc.port) + "/", Payload: []byte(`{}`)})
	if res.Outcome != Delivered {
		t.Fatalf("the loopback receiver through the same resolver: %v %q, want delivered", res.Outcome, res.Message)
	}
}
