package chaos

import (
	"context"
	"database/sql"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// progressLoop logs the kills, restarts, poison and pending events every 5 s until ctx ends.
func (r *run) progressLoop(ctx context.Context, db *sql.DB) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		pending, err := mysqltest.CountOpen(qctx, db)
		cancel()
		if err != nil {
			pending = -1
		}
		r.mu.Lock()
		rep := r.report
		r.mu.Unlock()
		r.logf("t=%s kills=%d db restarts=%d poison=%d pending=%d", time.Since(start).Round(time.Second),
			rep.Kills(), rep.DBStops+rep.DBKills, rep.PoisonInjected, pending)
	}
}

// settle waits until no event is pending and the DLQ holds every injected poison message.
func (r *run) settle(ctx context.Context, db *sql.DB) bool {
	deadline := time.Now().Add(r.cfg.Settle)
	for time.Now().Before(deadline) {
		pending, err := mysqltest.CountOpen(ctx, db)
		if err != nil {
			pending = -1
		}
		main, dlq := r.depth(r.q.URL), r.depth(r.q.DLQURL)
		if pending == 0 && main == 0 && dlq >= r.report.PoisonInjected {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// depth returns the messages a queue holds, visible and in flight, or -1 if it cannot tell.
func (r *run) depth(url string) int {
	visible, inFlight, err := queue.Depth(context.Background(), r.client, url)
	if err != nil {
		return -1
	}
	return visible + inFlight
}
