package client_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/exactlyonce/exactlyonce/internal/webhook"
)

// A receiver of a task's webhook verifies each delivery's signature with the Standard Webhooks
// library, over the webhook-id, webhook-timestamp and body headers, with the secret the stack signs
// with (whsec_ and the key in base64: the WEBHOOK_SECRET of docs/tasks.md). A delivery is at least
// once: the webhook-id is the same on every attempt, so the receiver drops one it has taken.
func newReceiver(secret string, out io.Writer) (http.Handler, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	taken := map[string]bool{} // one goroutine here; guard it with a mutex in a real server
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := wh.Verify(body, r.Header); err != nil { // also refuses a timestamp over 5 minutes off
			http.Error(w, "bad signature", http.StatusUnauthorized) // a 4xx: the task fails at once
			return
		}
		if id := r.Header.Get("webhook-id"); !taken[id] {
			taken[id] = true
			fmt.Fprintf(out, "task %s: %s\n", id, body)
		}
		w.WriteHeader(http.StatusNoContent)
	}), nil
}

// Example_receiver verifies a delivery signed as the stack signs it (internal/webhook, the
// deliverer's code), the same delivered again, and refuses one whose body was changed.
func Example_receiver() {
	h, err := newReceiver(signingSecret(), os.Stdout)
	if err != nil {
		panic(err)
	}
	send := func(id, body, signedBody string) int {
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		now := time.Now()
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
		req.Header.Set("webhook-signature", webhook.Sign(signingKey, id, now, []byte(signedBody)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	fmt.Println(send("evt_42", `{"order":42}`, `{"order":42}`))
	fmt.Println(send("evt_42", `{"order":42}`, `{"order":42}`)) // delivered again: taken once
	fmt.Println(send("evt_43", `{"order":666}`, `{"order":43}`))
	// Output:
	// task evt_42: {"order":42}
	// 204
	// 204
	// 401
}
