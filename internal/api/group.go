package api

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/groupcommit"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
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
// In a process serving many requests (the local runner, a container) it cuts the statements and
// the queue calls. A Lambda execution environment serves one request at a time, so there every
// group would hold one event; more to the point, the flusher is a goroutine of its own, running on
// a context of its own, and Lambda freezes the environment as soon as the answer is returned: a
// request whose deadline ends while its group is being stored returns, and the flusher is frozen
// mid-transaction, holding the counter's row lock or a block of ids. On Lambda, use Inline.
//
// With Linger set, a request is answered as soon as its group is committed, and the messages are
// sent by an outbox in the background, each naming up to Max events of any number of groups.
type AsyncGroup struct {
	// Inline stores and queues each request's event in the request's own goroutine, under the
	// request's context, and answers after both: no group, no flusher, no outbox. Max, Flushers and
	// Linger are ignored. Lambda needs this (see TestInlineAsyncCreateRunsNothingAfterTheAnswer).
	Inline bool
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
	// Zero (the default) answers after the group's message is sent.
	Linger time.Duration
}

// asyncGroups runs the groups. It is built on first use from the Server's fields.
type asyncGroups struct {
	store  EventStore
	queue  queue.Sender // nil: events are left to the sweeper
	inline bool         // AsyncGroup.Inline: no groups, no goroutine
	out    *outbox      // non-nil with Linger: sends the messages after the answers
	log    *slog.Logger
	rec    *metrics.Recorder // Server.Metrics: the groups run on no request's context
	max    int
	slots  int
	expire time.Duration

	// group stores the groups (internal/groupcommit): a request is no bytes and one row.
	group groupcommit.Group[struct{}, int64]
}

// groupTimeout bounds storing and queueing one group, and sending one message.
const groupTimeout = 10 * time.Second

func newAsyncGroups(s *Server) *asyncGroups {
	g := &asyncGroups{store: s.Events, queue: s.Queue, log: s.logger(), rec: s.Metrics,
		max:    min(max(cmp.Or(s.AsyncGroup.Max, queue.MaxIDs), 1), queue.MaxIDs),
		slots:  max(cmp.Or(s.AsyncGroup.Flushers, 1), 1),
		expire: groupTimeout, inline: s.AsyncGroup.Inline}
	if s.Queue != nil && s.AsyncGroup.Linger > 0 && !g.inline {
		g.out = newOutbox(s.Queue, g.log, g.max, s.AsyncGroup.Linger, g.expire)
		g.out.rec = s.Metrics
	}
	// A group runs on no request's context: a client that hangs up must not cancel the insert or
	// the send of the others. Inline, each request is its own group, in its own goroutine, under
	// its own context (with the same bound), and no goroutine of this package is left running.
	g.group = groupcommit.Group[struct{}, int64]{Run: g.run, MaxRows: g.max, Flushers: g.slots,
		Timeout: g.expire, Inline: g.inline,
		Context: func() context.Context { return metrics.With(context.Background(), g.rec) }}
	return g
}

// create stores one pending event, queues a message naming it (or, with Linger, hands it to the
// outbox), and returns its id. An error means the event was not stored (or that ctx ended first, in
// which case it may have been). A failed send is not an error: the event is committed, and the
// sweeper processes it after its grace period.
func (g *asyncGroups) create(ctx context.Context) (int64, error) {
	return g.group.Do(ctx, struct{}{})
}

// run stores one group's events and sends the message naming them (or hands them to the outbox).
func (g *asyncGroups) run(ctx context.Context, group []struct{}) ([]int64, error) {
	ids, err := g.store.CreatePendingBatch(ctx, len(group))
	if err != nil {
		return nil, err
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
	return ids, nil
}

// sendTimeout bounds one message's send, its SDK's retries included. SQS answers a SendMessage in
// milliseconds; a send not done in 2 s is failing, and a create that sends before it answers (as on
// Lambda) must answer well inside the API function's 10 s timeout. A message not sent costs its
// events the sweeper's grace period, never the events themselves.
const sendTimeout = 2 * time.Second

// sendOrLeave sends one message naming ids, the events of committed rows, within sendTimeout. If it
// cannot, it says so and leaves them pending: the sweeper processes them after its grace period.
func sendOrLeave(ctx context.Context, q queue.Sender, log *slog.Logger, ids []int64) {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
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

// queueCommitted queues a message naming ids, events whose rows are committed (a task's create, a
// retried task): through the outbox when the server lingers, else sent now under ctx. What cannot be
// sent is left to the sweeper.
func (g *asyncGroups) queueCommitted(ctx context.Context, ids []int64) {
	switch {
	case g.out != nil:
		g.out.add(ids)
	case g.queue != nil:
		ctx, cancel := context.WithTimeout(ctx, g.expire)
		defer cancel()
		sendOrLeave(ctx, g.queue, g.log, ids)
	}
}
