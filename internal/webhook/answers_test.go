package webhook

import (
	"bufio"
	"context"
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

	"github.com/exactlyonce/exactlyonce/internal/testutil"
)

// How answers, and their absence, are classified; the client's other edges.

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

// A failure's message is the task's exceptionMessage, which every reader of the API sees: it says
// what happened at the receiver's address, and names no address of the delivering side. A
// connection the receiver resets names the receiver's address, not the delivering process's own
// (on AWS, the function's private address in the VPC); a name that does not resolve is said so,
// without the resolver's address (the VPC's DNS).
func TestFailureMessagesNameNoAddressOfOurs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	peers := make(chan string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Read the whole request, then reset the connection instead of answering.
			_, _ = http.ReadRequest(bufio.NewReader(c))
			peers <- c.RemoteAddr().String()
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	c := New(Config{Key: testKey(t), AllowLoopback: true, Timeout: 5 * time.Second})
	res := c.Deliver(t.Context(), Request{ID: "t", URL: "http://" + ln.Addr().String() + "/", Payload: []byte(`{}`)})
	ours := <-peers
	if res.Outcome != Temporary || !strings.Contains(res.Message, "connection reset by peer") || !strings.Contains(res.Message, ln.Addr().String()) {
		t.Errorf("reset: %+v", res)
	}
	if strings.Contains(res.Message, ours) {
		t.Errorf("reset: the message %q names the delivering side's address %s", res.Message, ours)
	}

	dns := testutil.NewDNS(nil)
	c = New(Config{Key: testKey(t), Resolver: dns.Resolver(), Timeout: 5 * time.Second})
	res = c.Deliver(t.Context(), Request{ID: "t", URL: "http://nx.test/", Payload: []byte(`{}`)})
	if want := "dial tcp: lookup nx.test: no such host"; res.Outcome != Temporary || res.Message != want {
		t.Errorf("unknown name: %v %q, want temporary %q", res.Outcome, res.Message, want)
	}
	if len(dns.Names()) == 0 {
		t.Error("the test's resolver was not asked")
	}
}
