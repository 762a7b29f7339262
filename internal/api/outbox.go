package api

import (
	"context"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"log/slog"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// outboxLimit is how many messages' worth of ids the outbox holds at most (AsyncGroup.Linger). Past
// it, while the queue is slow or down, new ids are not held: their events are committed and pending,
// and the sweeper processes them after its grace period. It keeps a queue outage from growing the
// process's memory without bound.
const outboxLimit = 100

// outbox sends messages for committed events in the background (AsyncGroup.Linger): one message
// for up to max ids, when max are held or when linger has passed since the previous message was
// taken, whichever comes first. One sender goroutine runs while ids are held, and ends when none
// are, so an idle server has none.
type outbox struct {
	queue  queue.Sender
	log    *slog.Logger
	max    int
	linger time.Duration
	limit  int           // most ids held
	expire time.Duration // bounds one send

	rec *metrics.Recorder // Server.Metrics: the sender runs on no request's context

	mu      sync.Mutex
	ids     []int64
	since   time.Time     // when the ids held began to wait: the first was added, or a message was taken
	dropped int           // ids not held since the last message, for one warning
	hurry   bool          // drain was called: send without lingering
	running chan struct{} // non-nil while the sender runs; closed when it ends
	wake    chan struct{} // nudges a lingering sender: a message is full, or drain was called
}

func newOutbox(q queue.Sender, log *slog.Logger, max int, linger, expire time.Duration) *outbox {
	return &outbox{queue: q, log: log, max: max, linger: linger, limit: outboxLimit * max, expire: expire,
		wake: make(chan struct{}, 1)}
}

// add holds the ids of committed events for the sender.
func (o *outbox) add(ids []int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := o.limit - len(o.ids); len(ids) > room {
		o.dropped += len(ids) - max(room, 0)
		ids = ids[:max(room, 0)]
	}
	if len(ids) == 0 {
		return
	}
	if len(o.ids) == 0 {
		o.since = time.Now()
	}
	o.ids = append(o.ids, ids...)
	switch {
	case o.running == nil:
		o.running = make(chan struct{})
		go o.send(o.running)
	case len(o.ids) >= o.max:
		o.nudge()
	}
}

func (o *outbox) nudge() {
	select {
	case o.wake <- struct{}{}:
	default: // a nudge is already pending
	}
}

// send is the sender: it sends messages until no id is held.
func (o *outbox) send(done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(o.linger)
	defer timer.Stop()
	for {
		o.mu.Lock()
		if len(o.ids) == 0 {
			o.running = nil
			o.mu.Unlock()
			return
		}
		if wait := o.linger - time.Since(o.since); wait > 0 && len(o.ids) < o.max && !o.hurry {
			o.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-o.wake:
			}
			continue
		}
		n := min(len(o.ids), o.max)
		ids := append([]int64(nil), o.ids[:n]...)
		o.ids = append(o.ids[:0], o.ids[n:]...)
		o.since = time.Now()
		dropped := o.dropped
		o.dropped = 0
		o.mu.Unlock()

		if dropped > 0 {
			o.log.Warn("api: the queue is not keeping up; events left to the sweeper", "events", dropped)
		}
		ctx, cancel := context.WithTimeout(metrics.With(context.Background(), o.rec), o.expire)
		sendOrLeave(ctx, o.queue, o.log, ids)
		cancel()
	}
}

// drain sends every id held now without lingering, and returns when the sender has ended or ctx
// is done. Ids added meanwhile are sent too; from now on none lingers.
func (o *outbox) drain(ctx context.Context) error {
	o.mu.Lock()
	o.hurry = true
	done := o.running
	o.mu.Unlock()
	if done == nil {
		return nil
	}
	o.nudge()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
