package chaos

import (
	"context"
	"encoding/json"
	"errors"
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
}

// client_ creates events until ctx ends: sync and async at random, as fast as the API answers,
// each through a live API process taken at random (as a load balancer would). While none is live
// (the only one was killed), it waits for one.
func (r *run) client_(ctx context.Context, out chan<- created) {
	hc := &http.Client{Timeout: 30 * time.Second}
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
		if c.async {
			path = "/events/async"
		}
		// Not ctx: a request started is finished, so that its outcome is known.
		resp, err := hc.Post(apiURL+path, "application/json", nil)
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
		var body struct {
			ID int64 `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			c.err = err
		}
		resp.Body.Close()
		c.id = body.ID
		out <- c
		if c.status >= 500 {
			time.Sleep(50 * time.Millisecond) // Retry-After says 1 s; a client that retries a little sooner
		}
	}
}
