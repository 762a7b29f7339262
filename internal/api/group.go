package api

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// AsyncGroup shapes how POST /events/async stores and queues the events of concurrent requests.
//
// The requests that arrive while an earlier group is being stored wait for the next group and
// share its INSERT and its queue message, the way a database groups the commits of concurrent
// transactions. There is no timer: a request that finds a free flusher is stored at once, alone,
// so an idle server adds no latency, and a busy one pays one statement and one queue call for many
// events. Each request still gets its own id, and its own error when its group could not be stored.
//
// On Lambda an execution environment serves one request at a time, so every group holds one event:
// one INSERT and one {"id": N} message per request, as if there were no grouping. In a process
// serving many requests (the local runner, a container) it cuts the statements and the queue calls.
type AsyncGroup struct {
	// Max is the most events one group stores and one message names. Default and ceiling
	// queue.MaxIDs; 1 stores and queues every request on its own.
	Max int
	// Flushers is the most groups being stored and queued at once. Default 1: every request that
	// arrives during a group's round trips joins the next group.
	Flushers int
	// Timeout bounds storing and queueing one group. Default 10 s.
	Timeout time.Duration
}

// asyncGroups runs the groups. It is built on first use from the Server's fields.
type asyncGroups struct {
	store  Store
	queue  queue.Sender // nil: events are left to the sweeper
	log    *slog.Logger
	max    int
	slots  int
	expire time.Duration

	mu      sync.Mutex
	waiting []chan created
	active  int // flushers running
}

type created struct {
	id  int64
	err error
}

func newAsyncGroups(s *Server) *asyncGroups {
	return &asyncGroups{store: s.Store, queue: s.Queue, log: s.logger(),
		max:    min(max(cmp.Or(s.AsyncGroup.Max, queue.MaxIDs), 1), queue.MaxIDs),
		slots:  max(cmp.Or(s.AsyncGroup.Flushers, 1), 1),
		expire: cmp.Or(s.AsyncGroup.Timeout, 10*time.Second)}
}

// create stores one pending event, queues a message naming it, and returns its id. An error means
// the event was not stored (or that ctx ended first, in which case it may have been). A failed send
// is not an error: the event is committed, and the sweeper processes it after its grace period.
func (g *asyncGroups) create(ctx context.Context) (int64, error) {
	done := make(chan created, 1)
	g.mu.Lock()
	g.waiting = append(g.waiting, done)
	if g.active < g.slots {
		g.active++
		go g.flush()
	}
	g.mu.Unlock()
	select {
	case c := <-done:
		return c.id, c.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// flush stores and queues what is waiting, a group at a time, until nothing is. It serves every
// request in its groups, so it runs on no request's context: a client that hangs up must not cancel
// the insert or the send of the others. It ends when nothing waits, and the requests it serves wait
// for it, so it never outlives them.
func (g *asyncGroups) flush() {
	for {
		g.mu.Lock()
		n := min(len(g.waiting), g.max)
		if n == 0 {
			g.active--
			g.mu.Unlock()
			return
		}
		group := g.waiting[:n:n]
		g.waiting = g.waiting[n:]
		g.mu.Unlock()
		g.run(group)
	}
}

func (g *asyncGroups) run(group []chan created) {
	ctx, cancel := context.WithTimeout(context.Background(), g.expire)
	defer cancel()
	ids, err := g.store.CreatePendingBatch(ctx, len(group))
	if err != nil {
		for _, done := range group {
			done <- created{err: err}
		}
		return
	}
	// The events are committed. If the message cannot be sent, they stay pending and the sweeper
	// processes them after their grace period; the clients still get their ids.
	if g.queue != nil {
		if err := g.queue.Send(ctx, ids); err != nil {
			g.log.Warn("api: queue send failed; the sweeper will process the events", "ids", ids, "err", err)
		}
	}
	for i, done := range group {
		done <- created{id: ids[i]}
	}
}
