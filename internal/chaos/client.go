package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"
)

// created is one create's outcome as the client saw it.
type created struct {
	async  bool
	status int
	id     int64
	err    error
	// unreachable: the connection was refused, so no API received the request.
	unreachable bool
	// late: a create with an id taken long before (late.go).
	late bool
	// task: an async create of a task, the seq-th of its client's reference ref (tasks.go).
	task bool
	ref  string
	seq  int
}

// taskRefs is how many references each client creates tasks for.
const taskRefs = 3

// client_ creates events until ctx ends: sync and async at random, as fast as the API answers,
// each through a live API process taken at random (as a load balancer would). While none is live
// (the only one was killed), it waits for one.
func (r *run) client_(ctx context.Context, index int, out chan<- created) {
	hc := &http.Client{Timeout: 30 * time.Second}
	seqs := make([]int, taskRefs)
	asyncs := 0
	for ctx.Err() == nil {
		apiURL, started := r.apiURL()
		if apiURL == "" {
			select {
			case <-started:
			case <-ctx.Done():
			}
			continue
		}
		c := created{async: r.intn(2) == 0}
		path := "/events"
		var body io.Reader
		if c.async {
			path = "/events/async"
			asyncs++
			if r.tasks != nil && asyncs%r.cfg.TaskEvery == 0 {
				// A task of one of this client's references, created after the one before it was
				// answered (or failed): the reference's creation order is its seqs' order.
				j := r.intn(taskRefs)
				c.task, c.ref, c.seq = true, fmt.Sprintf("client%d-ref%d", index, j), seqs[j]
				seqs[j]++
				payload, _ := json.Marshal(taskPayload{Ref: c.ref, Seq: c.seq})
				b, _ := json.Marshal(map[string]any{"url": r.tasks.url, "payload": json.RawMessage(payload),
					"referenceId": c.ref, "maxRetries": 25})
				body = bytes.NewReader(b)
			}
		}
		// Not ctx: a request started is finished, so that its outcome is known.
		resp, err := hc.Post(apiURL+path, "application/json", body)
		if err != nil {
			c.err = err
			c.unreachable = errors.Is(err, syscall.ECONNREFUSED)
			out <- c
			if c.unreachable {
				time.Sleep(10 * time.Millisecond) // the process is gone; its successor is coming
			}
			continue
		}
		c.status = resp.StatusCode
		var answer struct {
			ID int64 `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			c.err = err
		}
		resp.Body.Close()
		c.id = answer.ID
		out <- c
		if c.status >= 500 {
			time.Sleep(50 * time.Millisecond) // Retry-After says 1 s; a client that retries a little sooner
		}
	}
}
