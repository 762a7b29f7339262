package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// gate keeps goaws alive under concurrent clients. goaws reads its map of queues without a lock in
// several actions (SendMessage, ReceiveMessage, CreateQueue, GetQueueUrl, ...) while CreateQueue and
// DeleteQueue write it, and Go ends the whole process on a concurrent map read and write. So the
// actions that change the map run alone, and every other action runs beside the others but never
// beside those.
//
// A long poll must not hold the gate for its whole wait (a create would then wait up to 20 s, and
// every request behind the create with it), so gate does the long poll itself: it asks goaws for
// messages without waiting, under the gate, and asks again when a message is sent or every 100 ms
// (goaws makes invisible messages visible again on a 100 ms tick) until some come or the wait ends.
//
// Only the JSON protocol (what the AWS SDKs speak) is read; a request in the query protocol runs
// alone, which is correct and slower.
type gate struct {
	next http.Handler
	rw   sync.RWMutex

	mu   sync.Mutex
	sent chan struct{} // closed, and replaced, when a message may have become receivable
}

func newGate(next http.Handler) *gate { return &gate{next: next, sent: make(chan struct{})} }

// mapWriters are the actions that add or remove queues.
var mapWriters = map[string]bool{"CreateQueue": true, "DeleteQueue": true}

// senders are the actions after which a waiting receive should look again.
var senders = map[string]bool{"SendMessage": true, "SendMessageBatch": true,
	"ChangeMessageVisibility": true, "ChangeMessageVisibilityBatch": true}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	action, ok := strings.CutPrefix(target, "AmazonSQS.")
	switch {
	case !ok || mapWriters[action]:
		g.rw.Lock()
		defer g.rw.Unlock()
		g.next.ServeHTTP(w, r)
	case action == "ReceiveMessage":
		g.receive(w, r)
	default:
		g.rw.RLock()
		g.next.ServeHTTP(w, r)
		g.rw.RUnlock()
		if senders[action] {
			g.wake()
		}
	}
}

func (g *gate) wake() {
	g.mu.Lock()
	close(g.sent)
	g.sent = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) woken() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent
}

// receive serves a ReceiveMessage: at once when it does not wait; otherwise as a series of receives
// that do not wait, until one returns messages or fails, or WaitTimeSeconds have passed.
func (g *gate) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "cannot read the request", http.StatusBadRequest)
		return
	}
	var in map[string]json.RawMessage
	var wait float64
	if json.Unmarshal(body, &in) == nil && in["WaitTimeSeconds"] != nil {
		_ = json.Unmarshal(in["WaitTimeSeconds"], &wait)
	}
	if wait <= 0 { // no wait asked: one receive (goaws applies a queue's own wait, if one was set)
		r.Body = io.NopCloser(bytes.NewReader(body))
		g.rw.RLock()
		defer g.rw.RUnlock()
		g.next.ServeHTTP(w, r)
		return
	}
	delete(in, "WaitTimeSeconds")
	short, _ := json.Marshal(in)
	deadline := time.Now().Add(time.Duration(wait * float64(time.Second)))
	for {
		woken := g.woken() // taken before the receive, so a send during it is not missed
		rec := httptest.NewRecorder()
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(short))
		req.ContentLength = int64(len(short))
		g.rw.RLock()
		g.next.ServeHTTP(rec, req)
		g.rw.RUnlock()
		if rec.Code != http.StatusOK || hasMessages(rec.Body.Bytes()) || !time.Now().Before(deadline) {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		tick := time.NewTimer(min(100*time.Millisecond, time.Until(deadline)))
		select {
		case <-woken:
		case <-tick.C:
		case <-r.Context().Done():
			tick.Stop()
			return // the client has gone
		}
		tick.Stop()
	}
}

func hasMessages(body []byte) bool {
	var out struct{ Messages []json.RawMessage }
	return json.Unmarshal(body, &out) == nil && len(out.Messages) > 0
}
