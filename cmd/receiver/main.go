// Command receiver is a small webhook receiver for tasks (README, "Tasks and webhooks"): it verifies
// every delivery's Standard Webhooks signature with the specification's own Go library, drops a
// delivery whose webhook-id it has already taken (a task is delivered at least once: again after the
// process delivering it died between the receiver's answer and the settlement), and prints each task it takes.
//
//	go run ./cmd/receiver -addr 127.0.0.1:9000 -secret "$WEBHOOK_SECRET"
//
// Answer codes, as the deliverer reads them: 204 taken (or a duplicate), 401 a bad signature (a
// permanent failure: the task fails at once), and, with -fail N, 503 for the first N attempts of each
// task (a temporary failure: retried with backoff).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/exactlyonce/exactlyonce/internal/httpserver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "where to listen")
	secret := flag.String("secret", os.Getenv("WEBHOOK_SECRET"), "the signing secret, whsec_... (default $WEBHOOK_SECRET)")
	fail := flag.Int("fail", 0, "answer 503 to the first N attempts of each task")
	flag.Parse()
	h, err := newHandler(*secret, *fail)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("receiver: listening on http://%s", *addr)
	srv := httpserver.New(h) // with the project's timeouts: an idle keep-alive connection is closed
	srv.Addr = *addr
	log.Fatal(srv.ListenAndServe())
}

// handler verifies, deduplicates and prints deliveries.
type handler struct {
	wh   *standardwebhooks.Webhook
	fail int
	out  io.Writer

	mu       sync.Mutex
	attempts map[string]int  // webhook-id -> attempts seen
	taken    map[string]bool // webhook-id -> taken
}

func newHandler(secret string, fail int) (*handler, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("signing secret: %w", err)
	}
	return &handler{wh: wh, fail: fail, out: os.Stdout, attempts: map[string]int{}, taken: map[string]bool{}}, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	// Verify checks the signature over id.timestamp.body, and that the timestamp is within five
	// minutes of now (a replayed old delivery is refused).
	if err := h.wh.Verify(body, r.Header); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	id := r.Header.Get("webhook-id")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts[id]++
	if h.attempts[id] <= h.fail {
		http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
		return
	}
	if h.taken[id] {
		w.WriteHeader(http.StatusNoContent) // a duplicate: taken before, answered again, not acted on twice
		return
	}
	h.taken[id] = true
	fmt.Fprintf(h.out, "%s %s\n", plain(id), printable(body))
	w.WriteHeader(http.StatusNoContent)
}

// printable is body as one line a terminal shows as it is: JSON without its insignificant
// whitespace (a carriage return would rewrite the line, a newline split the record), anything else
// quoted, control characters escaped.
func printable(body []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, body) == nil {
		return b.String()
	}
	return strconv.QuoteToGraphic(string(body))
}

// plain is s as it is when every character of it is graphic and not a space, else quoted.
func plain(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return strconv.QuoteToGraphic(s)
	}
	return s
}
