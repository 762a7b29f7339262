package webhook

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

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

// fakeDNS is a resolver answering from a table, in process (no packet leaves the test): the Go
// resolver speaks DNS over TCP framing to the net.Pipe its Dial returns. Every name asked is
// recorded.
type fakeDNS struct {
	answers map[string][]net.IP // by lower-case name with the final dot
	mu      sync.Mutex
	asked   []string
}

func (d *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		client, server := net.Pipe()
		go d.serve(server)
		return client, nil
	}}
}

func (d *fakeDNS) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// serve answers the queries on one stream connection: a 2-byte length, then the message.
func (d *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n uint16
		if binary.Read(c, binary.BigEndian, &n) != nil {
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		a := d.answer(q)
		if a == nil {
			return
		}
		if binary.Write(c, binary.BigEndian, uint16(len(a))) != nil {
			return
		}
		if _, err := c.Write(a); err != nil {
			return
		}
	}
}

// answer builds the reply to query q: its id and question, and the table's addresses of the type
// asked (A or AAAA), or NXDOMAIN for a name not in the table.
func (d *fakeDNS) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	// The question: labels up to the root, then type and class.
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	i++
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]
	name := strings.ToLower(strings.Join(labels, ".")) + "."
	d.mu.Lock()
	d.asked = append(d.asked, name)
	d.mu.Unlock()

	ips, known := d.answers[name]
	var rrs [][]byte
	for _, ip := range ips {
		var data []byte
		switch {
		case qtype == 1 && ip.To4() != nil:
			data = ip.To4()
		case qtype == 28 && ip.To4() == nil:
			data = ip.To16()
		default:
			continue
		}
		rr := []byte{0xc0, 12} // the name: a pointer to the question's
		rr = binary.BigEndian.AppendUint16(rr, qtype)
		rr = binary.BigEndian.AppendUint16(rr, 1) // class IN
		rr = binary.BigEndian.AppendUint32(rr, 60)
		rr = binary.BigEndian.AppendUint16(rr, uint16(len(data)))
		rrs = append(rrs, append(rr, data...))
	}
	flags := uint16(0x8180) // a response, recursion desired and available, no error
	if !known {
		flags |= 3 // NXDOMAIN
	}
	a := append([]byte(nil), q[0:2]...)
	a = binary.BigEndian.AppendUint16(a, flags)
	a = binary.BigEndian.AppendUint16(a, 1)
	a = binary.BigEndian.AppendUint16(a, uint16(len(rrs)))
	a = append(a, 0, 0, 0, 0)
	a = append(a, question...)
	for _, rr := range rrs {
		a = append(a, rr...)
	}
	return a
}

func loopbackDNS() *fakeDNS {
	return &fakeDNS{answers: map[string][]net.IP{
		"loopback.test.": {net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		"v4only.test.":   {net.ParseIP("127.0.0.1")},
		"localhost.":     {net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		"mapped.test.":   {net.ParseIP("::ffff:127.0.0.1")},
	}}
}

// The forgery matrix: with loopback not allowed, every url that means the loopback receiver is
// refused, and the receiver sees no connection at all. The same client allowing loopback reaches
// it through the same names, so the refusals are the rule's and not a resolution failure.
func TestForgeryMatrix(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	dns := loopbackDNS()
	strict := New(Config{Key: testKey(t), Resolver: dns.resolver(), Timeout: 5 * time.Second})
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
		{"localhost", "localhost is "},
		{"LOCALHOST", "LOCALHOST is "},
		{"localhost.", "localhost. is "},
		{"loopback.test", "loopback.test is "},
		{"v4only.test", "v4only.test is 127.0.0.1, a loopback address"},
		{"mapped.test", "mapped.test is 127.0.0.1, a loopback address"},
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
	}
	if n := rc.connections(); n != 0 {
		t.Fatalf("the loopback receiver accepted %d connections from refused deliveries", n)
	}
	if rc.hits.Load() != 0 {
		t.Fatal("the loopback receiver served a refused delivery")
	}
	for _, name := range dns.names() {
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
	loose := New(Config{Key: testKey(t), Resolver: dns.resolver(), AllowLoopback: true, Timeout: 5 * time.Second})
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

// The answers and how they are classified.
func TestClassification(t *testing.T) {
	t.Parallel()
	var redirectTargetHits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirectTargetHits.Add(1) }))
	t.Cleanup(target.Close)
	date := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	big := strings.Repeat("x", 1023) + "é" + strings.Repeat("y", 5000) // é straddles byte 1024
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		switch r.URL.Query().Get("h") {
		case "seconds":
			w.Header().Set("Retry-After", "7")
		case "date":
			w.Header().Set("Retry-After", date)
		case "past":
			w.Header().Set("Retry-After", "Mon, 02 Jan 2006 15:04:05 GMT")
		case "junk":
			w.Header().Set("Retry-After", "soon")
		case "location":
			w.Header().Set("Location", target.URL+"/moved")
		}
		w.WriteHeader(status)
		switch r.URL.Query().Get("b") {
		case "big":
			io.WriteString(w, big)
		case "empty":
		case "invalid":
			w.Write([]byte("bad \xff\xfe bytes"))
		default:
			fmt.Fprintf(w, "status %d", status)
		}
	}))
	t.Cleanup(srv.Close)
	c := New(Config{Key: testKey(t), AllowLoopback: true})
	for _, tc := range []struct {
		path       string
		outcome    Outcome
		retryAfter time.Duration
		message    string
	}{
		{"/200", Delivered, 0, ""},
		{"/201", Delivered, 0, ""},
		{"/204", Delivered, 0, ""},
		{"/299", Delivered, 0, ""},
		{"/503", Temporary, 0, "HTTP 503: status 503"},
		{"/500", Temporary, 0, "HTTP 500: status 500"},
		{"/502", Temporary, 0, "HTTP 502: status 502"},
		{"/408", Temporary, 0, "HTTP 408: status 408"},
		{"/429?h=seconds", Temporary, 7 * time.Second, "HTTP 429: status 429"},
		{"/503?h=date", Temporary, time.Hour, "HTTP 503: status 503"},
		{"/503?h=past", Temporary, 0, "HTTP 503"},
		{"/503?b=empty", Temporary, 0, "HTTP 503"},
		{"/503?h=junk", Temporary, 0, "HTTP 503"},
		{"/400", Permanent, 0, "HTTP 400: status 400"},
		{"/404", Permanent, 0, "HTTP 404: status 404"},
		{"/410?h=seconds", Permanent, 7 * time.Second, "HTTP 410"},
		{"/301?h=location", Permanent, 0, "HTTP 301: status 301"},
		{"/302?h=location", Permanent, 0, "HTTP 302"},
		{"/307?h=location", Permanent, 0, "HTTP 307"},
		{"/308?h=location", Permanent, 0, "HTTP 308"},
		{"/500?b=big", Temporary, 0, "HTTP 500: " + strings.Repeat("x", 1023)},
		{"/400?b=invalid", Permanent, 0, "HTTP 400: bad \uFFFD bytes"},
	} {
		res := c.Deliver(t.Context(), Request{ID: "t1", URL: srv.URL + tc.path, Payload: []byte(`{}`)})
		wantStatus, _ := strconv.Atoi(strings.SplitN(tc.path[1:], "?", 2)[0])
		if res.Outcome != tc.outcome || res.Status != wantStatus {
			t.Errorf("%s: %v %d, want %v %d", tc.path, res.Outcome, res.Status, tc.outcome, wantStatus)
		}
		if tc.retryAfter == time.Hour {
			if res.RetryAfter < 58*time.Minute || res.RetryAfter > time.Hour {
				t.Errorf("%s: Retry-After %s, want about an hour", tc.path, res.RetryAfter)
			}
		} else if res.RetryAfter != tc.retryAfter {
			t.Errorf("%s: Retry-After %s, want %s", tc.path, res.RetryAfter, tc.retryAfter)
		}
		if !strings.HasPrefix(res.Message, tc.message) || (tc.message == "" && res.Message != "") {
			t.Errorf("%s: message %.80q, want it to start with %.80q", tc.path, res.Message, tc.message)
		}
		if !utf8.ValidString(res.Message) {
			t.Errorf("%s: message is not valid UTF-8", tc.path)
		}
		if strings.Contains(tc.path, "empty") && res.Message != "HTTP 503" {
			t.Errorf("an empty body's message is %q, want the status alone", res.Message)
		}
		if strings.Contains(tc.path, "big") {
			// The first 1 KiB of the body, cut before the character that straddles its end.
			if want := "HTTP 500: " + strings.Repeat("x", 1023); res.Message != want {
				t.Errorf("the big body's message is %d bytes, ends %q; want the body's first 1023", len(res.Message), res.Message[len(res.Message)-10:])
			}
		}
	}
	if n := redirectTargetHits.Load(); n != 0 {
		t.Fatalf("a redirect was followed: its target served %d requests", n)
	}
}

// Connection errors and timeouts are temporary; an answer that never ends is not read to its end;
// a receiver whose certificate does not verify is not delivered to.
func TestFailuresWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	c := New(Config{Key: testKey(t), AllowLoopback: true, Timeout: 300 * time.Millisecond})

	// Connection refused: a loopback port nothing listens on any more.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/"
	l.Close()
	res := c.Deliver(t.Context(), Request{ID: "t", URL: closed})
	if res.Outcome != Temporary || res.Status != 0 || !strings.Contains(res.Message, "connection refused") {
		t.Errorf("closed port: %+v", res)
	}
	if strings.Contains(res.Message, "Post ") {
		t.Errorf("the message repeats the url: %q", res.Message)
	}

	// A receiver that never answers: the timeout.
	release := make(chan struct{})
	var blockedHits atomic.Int64
	blocking := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		blockedHits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(blocking.Close)
	t.Cleanup(func() { close(release) }) // runs first: unblocks the handler so Close can finish
	res = c.Deliver(t.Context(), Request{ID: "t", URL: blocking.URL})
	if res.Outcome != Temporary || res.Status != 0 || res.Message != "timeout: no answer within 300ms" {
		t.Errorf("blocking receiver: %+v", res)
	}
	if res.Duration < 300*time.Millisecond || res.Duration > 5*time.Second || blockedHits.Load() != 1 {
		t.Errorf("blocking receiver: took %s, %d requests", res.Duration, blockedHits.Load())
	}

	// An error status with a body that never ends: the attempt ends once the message's bytes and
	// a little more are read, not at the timeout.
	var written atomic.Int64
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		chunk := []byte(strings.Repeat("z", 1024))
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(endless.Close)
	slow := New(Config{Key: testKey(t), AllowLoopback: true, Timeout: 5 * time.Second})
	res = slow.Deliver(t.Context(), Request{ID: "t", URL: endless.URL})
	if res.Outcome != Temporary || res.Status != 503 || res.Message != "HTTP 503: "+strings.Repeat("z", 1024) {
		t.Errorf("endless body: %v %d %.40q (%d bytes)", res.Outcome, res.Status, res.Message, len(res.Message))
	}
	if res.Duration > 4*time.Second {
		t.Errorf("endless body: the attempt took %s: it read to the timeout", res.Duration)
	}

	// TLS is verified: httptest's certificate is signed by no root the system trusts.
	var tlsHits atomic.Int64
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tlsHits.Add(1) }))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	res = slow.Deliver(t.Context(), Request{ID: "t", URL: tlsSrv.URL})
	if res.Outcome != Temporary || !strings.Contains(res.Message, "certificate") || tlsHits.Load() != 0 {
		t.Errorf("self-signed receiver: %+v, %d requests served", res, tlsHits.Load())
	}

	// The caller's context ending stops the attempt: temporary, the task is not lost.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res := slow.Deliver(ctx, Request{ID: "t", URL: blocking.URL}); res.Outcome != Temporary || res.Message != "stopped before an answer: context canceled" {
		t.Errorf("cancelled context: %+v", res)
	}
	// The caller's deadline (an invocation's) bounds the attempt when it comes before the timeout.
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	res = slow.Deliver(ctx, Request{ID: "t", URL: blocking.URL})
	if res.Outcome != Temporary || res.Message != "stopped before an answer: context deadline exceeded" || res.Duration > 4*time.Second {
		t.Errorf("caller's deadline: %+v", res)
	}
}

// A url that fails ValidateURL, or a request without an id, is a permanent failure, and nothing is
// dialled.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	c := New(Config{Key: testKey(t), AllowLoopback: true})
	p := strconv.Itoa(rc.port)
	for _, tc := range []struct{ r Request }{
		{Request{ID: "t", URL: "ftp://127.0.0.1:" + p + "/"}},
		{Request{ID: "t", URL: "http://u:p@127.0.0.1:" + p + "/"}},
		{Request{ID: "t", URL: ""}},
		{Request{ID: "", URL: "http://127.0.0.1:" + p + "/"}},
	} {
		if res := c.Deliver(t.Context(), tc.r); res.Outcome != Permanent || res.Message == "" {
			t.Errorf("%+v: %+v", tc.r, res)
		}
	}
	if rc.connections() != 0 {
		t.Fatal("a bad request was dialled")
	}
}

// No proxy from the environment: HTTP_PROXY would carry the connection past the address rule.
func TestNoProxy(t *testing.T) {
	t.Parallel()
	c := New(Config{Key: testKey(t)})
	tr, ok := c.http.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil || tr.TLSClientConfig != nil {
		t.Fatalf("the transport must have no proxy and the default TLS verification: %#v", c.http.Transport)
	}
}

func TestNewWithoutKeyPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("New without a key did not panic")
		}
	}()
	New(Config{})
}

// One Client delivers concurrently.
func TestConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Header.Get(HeaderID)] = string(body)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	c := New(Config{Key: testKey(t), AllowLoopback: true})
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := "task_" + strconv.Itoa(i)
			if res := c.Deliver(t.Context(), Request{ID: id, URL: srv.URL, Payload: []byte(strconv.Itoa(i))}); res.Outcome != Delivered {
				t.Errorf("%s: %+v", id, res)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if got := seen["task_"+strconv.Itoa(i)]; got != strconv.Itoa(i) {
			t.Errorf("task_%d: the receiver got %q", i, got)
		}
	}
}
