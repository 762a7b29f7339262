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
	// key: a create sent with this Idempotency-Key (Config.KeyEvery), again and again until it was
	// acknowledged; attempts is how many times it was sent, path and body what. unfinished: the
	// run ended before it was, and it is finished after the chaos, with every process up
	// (finishKeyed).
	key        string
	attempts   int
	path       string
	body       []byte
	unfinished bool
}

// taskRefs is how many references each client creates tasks for.
const taskRefs = 3

// client_ creates events until ctx ends: sync and async at random, as fast as the API answers,
// each through a live API process taken at random (as a load balancer would). While none is live
// (the only one was killed), it waits for one.
func (r *run) client_(ctx context.Context, index int, out chan<- created) {
	hc := &http.Client{Timeout: 30 * time.Second}
	seqs := make([]int, taskRefs)
	asyncs, creates := 0, 0
	for ctx.Err() == nil {
		apiURL := r.liveAPI(ctx)
		if apiURL == "" {
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
		creates++
		if r.cfg.KeyEvery > 0 && creates%r.cfg.KeyEvery == 0 {
			c.key, c.path = fmt.Sprintf("chaos-%d-client%d-%d", r.cfg.Seed, index, creates), path
			if body != nil {
				c.body, _ = io.ReadAll(body)
			}
			r.keyedCreate(ctx, hc, &c)
			out <- c
			continue
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

// keyedCreate sends c with its Idempotency-Key until an API acknowledges it, as a client that
// holds on to its key does: again after a connection error (the API killed), a 5xx (the database
// restarting, a transaction that gave up) or a 409 (the key in flight, in an API killed while it
// held the key, or in another API). Any other answer ends it, recorded as that status. When ctx
// ends first, c is left unfinished, for finishKeyed.
func (r *run) keyedCreate(ctx context.Context, hc *http.Client, c *created) {
	for ctx.Err() == nil {
		apiURL := r.liveAPI(ctx)
		if apiURL == "" {
			continue
		}
		c.attempts++
		c.status, c.id, c.err = keyedPost(hc, apiURL, c)
		if c.err == nil && c.status != http.StatusConflict && c.status != http.StatusTooManyRequests && c.status < 500 {
			c.unfinished = false
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	c.unfinished = true
}

// keyedPost sends c once, with its key, and reads the id it is answered.
func keyedPost(hc *http.Client, apiURL string, c *created) (int, int64, error) {
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(http.MethodPost, apiURL+c.path, body)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.key)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var answer struct {
		ID int64 `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return resp.StatusCode, 0, err
	}
	return resp.StatusCode, answer.ID, nil
}

// finishKeyed sends again, after the chaos, the keyed creates the run's end left unacknowledged:
// with every process up and the database running, each must be acknowledged within a minute (one
// key held by a killed API is free again after IDEMPOTENCY_WAIT). One left unfinished is a
// violation of the checker's.
func (r *run) finishKeyed(ctx context.Context, collected []created) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := range collected {
		if c := &collected[i]; c.unfinished {
			r.keyedCreate(ctx, hc, c)
		}
	}
}

// liveAPI returns the URL of a live API process taken at random, waiting for one while none is
// live (the only one was killed); "" once ctx ends.
func (r *run) liveAPI(ctx context.Context) string {
	for ctx.Err() == nil {
		apiURL, started := r.apiURL()
		if apiURL != "" {
			return apiURL
		}
		select {
		case <-started:
		case <-ctx.Done():
		}
	}
	return ""
}
