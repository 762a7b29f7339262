package chaos

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"sync"

	"github.com/exactlyonce/exactlyonce/internal/httpserver"
)

// Tasks in the chaos run: every TaskEvery-th async create of a client is a task (an event with a
// webhook) of one of the client's own references, which it creates one after the other, so that their
// creation order is known: seq 0, 1, 2, ... per reference. The receiver is this process (it is never
// killed); the processes deliver to it while they are killed, the database restarts and the contender
// holds locks. It checks, as each request arrives, that a reference's tasks are attempted in
// creation order (a task is attempted only once every earlier one is settled, so the seqs a
// reference's requests carry never go down), and counts the deliveries: each task acknowledged to
// its client must be delivered, and a repeat of a delivered task (a process killed between the answer
// and its settlement) must carry the same webhook-id.

// taskSecret signs the run's deliveries (the processes get it as WEBHOOK_SECRET).
const taskSecret = "whsec_Y2hhb3MtcnVuLXRhc2stc2lnbmluZy1zZWNyZXQtMDEyMzQ1Njc4OQ=="

// taskPayload is what a chaos task carries.
type taskPayload struct {
	Ref string `json:"ref"`
	Seq int    `json:"seq"`
}

// taskReceiver is the run's webhook receiver.
type taskReceiver struct {
	srv *http.Server
	url string

	mu        sync.Mutex
	attempted map[string]int         // reference -> highest seq attempted
	delivered map[string]int         // webhook-id -> 2xx answers
	ids       map[string]taskPayload // webhook-id -> its task
	attempts  map[string]int         // webhook-id -> requests
	problems  []string
}

func startTaskReceiver() (*taskReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &taskReceiver{url: "http://" + ln.Addr().String() + "/hook", attempted: map[string]int{},
		delivered: map[string]int{}, ids: map[string]taskPayload{}, attempts: map[string]int{}}
	r.srv = httpserver.New(r)
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *taskReceiver) close() { _ = r.srv.Close() }

func (r *taskReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var p taskPayload
	if err := json.NewDecoder(req.Body).Decode(&p); err != nil || p.Ref == "" {
		http.Error(w, "not a chaos task", http.StatusBadRequest)
		return
	}
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.ids[id]; ok && prev != p {
		r.problems = append(r.problems, fmt.Sprintf("webhook-id %s carried task %s/%d and then %s/%d", id, prev.Ref, prev.Seq, p.Ref, p.Seq))
	}
	r.ids[id] = p
	if last, ok := r.attempted[p.Ref]; ok && p.Seq < last {
		r.problems = append(r.problems, fmt.Sprintf("reference %s: task %d attempted after task %d", p.Ref, p.Seq, last))
	}
	r.attempted[p.Ref] = max(r.attempted[p.Ref], p.Seq)
	r.attempts[id]++
	// One task in four fails its first attempt, temporarily: the backoff path runs under the chaos.
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", p.Ref, p.Seq)
	if h.Sum32()%4 == 0 && r.attempts[id] == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.delivered[id]++
	w.WriteHeader(http.StatusNoContent)
}

// taskFigures are the receiver's counts: tasks delivered, deliveries repeated (the same webhook-id
// answered 2xx again), and what it found wrong.
func (r *taskReceiver) taskFigures() (delivered, repeated int, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.delivered {
		delivered++
		repeated += n - 1
	}
	return delivered, repeated, append([]string(nil), r.problems...)
}

// wasDelivered tells whether the task with webhook-id id was answered 2xx.
func (r *taskReceiver) wasDelivered(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered[id] > 0
}
