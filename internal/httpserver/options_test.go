package httpserver

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// "OPTIONS * HTTP/1.1" reaches the server's handler, which answers it as it answers any request it
// does not route (the API: a JSON 404 with nosniff). net/http answered it itself, a bare 200 with
// no body and none of the handler's headers, so `make run`'s API gave one answer that was not JSON
// and said no nosniff, beside a router written to refuse it (internal/api/router.go).
func TestOptionsStarReachesTheHandler(t *testing.T) {
	t.Parallel()
	srv := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"no route for ` + r.Method + " " + r.RequestURI + `"}`))
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("OPTIONS *: %d %v %q, want the handler's 404 with nosniff", resp.StatusCode, resp.Header, body.String())
	}
}
