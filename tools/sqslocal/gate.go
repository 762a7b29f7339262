package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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
// It also corrects goaws's count of visible messages (attributes): goaws answers every message it
// holds as ApproximateNumberOfMessages, those in flight included, where SQS counts only the ones a
// receive could take.
//
// Only the JSON protocol (what the AWS SDKs speak) is read; a request in the query protocol runs
// alone, which is correct and slower (and its counts are goaws's).
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
	case action == "GetQueueAttributes":
		g.attributes(w, r)
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

// The attributes whose meaning goaws and SQS disagree on: goaws's ApproximateNumberOfMessages is
// every message of the queue, SQS's the visible ones (neither in flight nor delayed); goaws counts
// both of those as NotVisible.
const (
	attrVisible    = "ApproximateNumberOfMessages"
	attrNotVisible = "ApproximateNumberOfMessagesNotVisible"
)

// attributes serves a GetQueueAttributes as SQS would: it asks goaws for NotVisible as well
// whenever the visible count is asked (both are read under one lock in goaws, so they agree), and
// answers ApproximateNumberOfMessages as goaws's total less the messages that are not visible.
func (g *gate) attributes(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "cannot read the request", http.StatusBadRequest)
		return
	}
	var in map[string]json.RawMessage
	var names []string
	if json.Unmarshal(body, &in) == nil && in["AttributeNames"] != nil {
		_ = json.Unmarshal(in["AttributeNames"], &names)
	}
	all := len(names) == 0 || slices.Contains(names, "All")
	wantVisible := all || slices.Contains(names, attrVisible)
	wantNotVisible := all || slices.Contains(names, attrNotVisible)
	if wantVisible && !wantNotVisible {
		in["AttributeNames"], _ = json.Marshal(append(names, attrNotVisible))
		body, _ = json.Marshal(in)
	}
	rec := httptest.NewRecorder()
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	g.rw.RLock()
	g.next.ServeHTTP(rec, req)
	g.rw.RUnlock()
	out := rec.Body.Bytes()
	if rec.Code == http.StatusOK && wantVisible {
		out = visibleOnly(out, !wantNotVisible)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_, _ = w.Write(out)
}

// visibleOnly rewrites goaws's answer so that ApproximateNumberOfMessages counts the visible
// messages only, dropping NotVisible when the client did not ask for it. An answer it cannot read
// is returned as it is.
func visibleOnly(body []byte, dropNotVisible bool) []byte {
	var out map[string]json.RawMessage
	var attrs map[string]string
	if json.Unmarshal(body, &out) != nil || json.Unmarshal(out["Attributes"], &attrs) != nil {
		return body
	}
	total, err1 := strconv.Atoi(attrs[attrVisible])
	hidden, err2 := strconv.Atoi(attrs[attrNotVisible])
	if err1 != nil || err2 != nil {
		return body
	}
	attrs[attrVisible] = strconv.Itoa(max(total-hidden, 0))
	if dropNotVisible {
		delete(attrs, attrNotVisible)
	}
	out["Attributes"], _ = json.Marshal(attrs)
	b, err := json.Marshal(out)
	if err != nil {
		return body
	}
	return b
}
