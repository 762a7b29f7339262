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
//
// With Linger set, a request is answered as soon as its group is committed, and the messages are
// sent by an outbox in the background, each naming up to Max events of any number of groups.
type AsyncGroup struct {
	// Max is the most events one group stores and one message names. Default and ceiling
	// queue.MaxIDs; 1 stores and queues every request on its own.
	Max int
	// Flushers is the most groups being stored and queued at once. Default 1: every request that
	// arrives during a group's round trips joins the next group.
	Flushers int
	// Linger, when positive, answers each request once its event is committed, before any message
	// names it, and leaves the messages to an outbox: it sends one for up to Max events when Max are
	// held, or when Linger has passed since it sent the previous one. The answer then means stored,
	// and queued within about Linger. If the process dies in between, or the send fails, the event
	// is pending with no message, and the sweeper processes it after its grace period, as it does
	// when a send fails with Linger zero. Call Server.Drain on shutdown to send what is held.
	//
	// Zero (the default) answers after the group's message is sent. Lambda needs this: it freezes
	// an execution environment once the answer is returned, so no work may be left for after it.
	Linger time.Duration
}

// asyncGroups runs the groups. It is built on first use from the Server's fields.
type asyncGroups struct {
	store  Store
	queue  queue.Sender // nil: events are left to the sweeper
	out    *outbox      // non-nil with Linger: sends the messages after the answers
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

// groupTimeout bounds storing and queueing one group, and sending one message.
const groupTimeout = 10 * time.Second

func newAsyncGroups(s *Server) *asyncGroups {
	g := &asyncGroups{store: s.Store, queue: s.Queue, log: s.logger(),
		max:    min(max(cmp.Or(s.AsyncGroup.Max, queue.MaxIDs), 1), queue.MaxIDs),
		slots:  max(cmp.Or(s.AsyncGroup.Flushers, 1), 1),
		expire: groupTimeout}
	if s.Queue != nil && s.AsyncGroup.Linger > 0 {
		g.out = newOutbox(s.Queue, g.log, g.max, s.AsyncGroup.Linger, g.expire)
	}
	return g
}

// create stores one pending event, queues a message naming it (or, with Linger, hands it to the
// outbox), and returns its id. An error means the event was not stored (or that ctx ended first, in
// which case it may have been). A failed send is not an error: the event is committed, and the
// sweeper processes it after its grace period.
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
	// processes them after their grace period; the clients still get their ids. The outbox holds
	// the ids before the requests are answered, so that Drain after the HTTP server's Shutdown
	// (which waits for the answers) sends them.
	if g.out != nil {
		g.out.add(ids)
	} else if g.queue != nil {
		sendOrLeave(ctx, g.queue, g.log, ids)
	}
	for i, done := range group {
		done <- created{id: ids[i]}
	}
}

// sendOrLeave sends one message naming ids, the events of committed rows. If it cannot, it says so
// and leaves them pending: the sweeper processes them after its grace period.
func sendOrLeave(ctx context.Context, q queue.Sender, log *slog.Logger, ids []int64) {
	if err := q.Send(ctx, ids); err != nil {
		log.Warn("api: queue send failed; the sweeper will process the events", "ids", ids, "err", err)
	}
}

// drain sends the messages the outbox holds (AsyncGroup.Linger); see Server.Drain.
func (g *asyncGroups) drain(ctx context.Context) error {
	if g.out == nil {
		return nil
	}
	return g.out.drain(ctx)
}
