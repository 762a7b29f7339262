package sweeping

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// The counter service's part of every sweep (sweepCounters): publish the notifications that were
// recorded but not published (their consumer's publish failed, or it died between its commit and
// its publish), reconcile the counts of a sample of users, and prune what has outlived its use
// (read entities past the retention, published notifications), each in bounded batches.

// Metrics of the counter sweep, in the sweeper's namespace and dimension (metrics.go).
const (
	// MetricCounterMismatches is the number of counts the reconciliation found wrong (a sum that
	// differs from its counted entities, or an entity counted twice). Alarmed on above 0.
	MetricCounterMismatches = "CounterMismatches"
	// MetricCounterRepublished is the number of notifications the sweep published.
	MetricCounterRepublished = "CounterNotificationsRepublished"
	// MetricCounterSweepErrors is 1 when a step of the counter sweep failed, else 0.
	MetricCounterSweepErrors = "CounterSweepErrors"
)

// Counters configures the counter sweep (Config.Counters; nil: no counter sweep). The zero value
// sweeps with the defaults and publishes nothing (no Publisher).
type Counters struct {
	// Publisher publishes the notifications left unpublished. Nil: none are (they wait).
	Publisher counters.Publisher
	// RepublishAfter leaves notifications younger than this to their consumer, which publishes
	// them right after its commit. Default 30 s (a consumer's publish takes at most
	// counters.PublishTimeout); negative: none is left.
	RepublishAfter time.Duration
	// Batch is the most notifications published, entities pruned or notifications pruned per
	// statement. Default 500.
	Batch int
	// Limit is the most of each a sweep handles. Default 5,000.
	Limit int
	// SampleBuckets is the number of user buckets whose counts are reconciled per sweep, chosen
	// at random; SampleCounts bounds the counts checked. Defaults 4 and 50.
	SampleBuckets, SampleCounts int
	// KeepPublished is how long a published notification is kept. Default 1 hour.
	KeepPublished time.Duration
}

// CounterStore is the counter service's store as its sweep uses it (internal/mysql/counterstore
// implements it).
type CounterStore interface {
	UnpublishedCounterResults(ctx context.Context, olderThan time.Duration, limit int) (map[string][]byte, error)
	MarkCounterPublished(ctx context.Context, ids []string) error
	RandomCounterBuckets(n int) []int64
	ReconcileCounters(ctx context.Context, buckets []int64, limit int) (int, []exactlyonce.CounterMismatch, error)
	PruneReadCounterEntities(ctx context.Context, batch, limit int) (int, error)
	PruneCounterNotifications(ctx context.Context, age time.Duration, batch, limit int) (int, error)
}

// CounterSweepResult says what one counter sweep did.
type CounterSweepResult struct {
	Republished         int `json:"republished"`
	Checked             int `json:"checked"`
	Mismatches          int `json:"mismatches"`
	PrunedEntities      int `json:"prunedEntities"`
	PrunedNotifications int `json:"prunedNotifications"`
	Errors              int `json:"errors"`
}

// sweepCounters runs the counter sweep after the events', when configured, and reports it: a
// log line when it did something, an error line per mismatch and per failed step, and a metric
// metric of each in the invocation's line. A failure does not fail the sweep of events: the next sweep tries again.
func (s *Sweeper) sweepCounters(ctx context.Context) {
	store := s.stores.Counters
	if s.cfg.Counters == nil || store == nil || ctx.Err() != nil {
		return
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < s.cfg.StopBefore {
		return
	}
	res := SweepCounters(ctx, store, *s.cfg.Counters, s.cfg.Logger)
	// Into the invocation's one line (publish); recorded even at zero, so that the line says the
	// counter sweep ran.
	rec := s.recorder(ctx)
	rec.Add(metrics.CounterMismatches, res.Mismatches)
	rec.Add(metrics.CounterRepublished, res.Republished)
	rec.Add(metrics.CounterSweepErrors, min(res.Errors, 1))
}

// SweepCounters is the counter sweep on store (the sweeper's, and tests').
func SweepCounters(ctx context.Context, store CounterStore, cfg Counters, log *slog.Logger) CounterSweepResult {
	if log == nil {
		log = slog.Default()
	}
	batch, limit := cmp.Or(cfg.Batch, 500), cmp.Or(cfg.Limit, 5000)
	after := cmp.Or(cfg.RepublishAfter, 30*time.Second)
	var res CounterSweepResult
	// A failed step is retried by the next sweep, a minute later: a warning. What needs a person is
	// a step that keeps failing, which CounterSweepErrors and its alarm (infra/counters.go) say.
	fail := func(step string, err error) {
		if ctx.Err() != nil {
			return // a stop cut it short: not a failure
		}
		res.Errors++
		log.Warn("sweeper: counter "+step+" failed; the next sweep tries again", "err", err)
	}

	if cfg.Publisher != nil {
		for res.Republished < limit {
			pending, err := store.UnpublishedCounterResults(ctx, max(after, 0), min(batch, limit-res.Republished))
			if err != nil {
				fail("republish", err)
				break
			}
			if len(pending) == 0 {
				break
			}
			ns := make([]counters.Notification, 0, len(pending))
			for id, body := range pending {
				ns = append(ns, counters.Notification{ID: id, Body: body})
			}
			published, err := cfg.Publisher.Publish(ctx, ns)
			if merr := store.MarkCounterPublished(ctx, published); merr != nil && err == nil {
				err = merr
			}
			res.Republished += len(published)
			if err != nil {
				fail("republish", err)
				break
			}
		}
	}

	checked, bad, err := store.ReconcileCounters(ctx, store.RandomCounterBuckets(cmp.Or(cfg.SampleBuckets, 4)), cmp.Or(cfg.SampleCounts, 50))
	if err != nil {
		fail("reconciliation", err)
	}
	res.Checked, res.Mismatches = checked, len(bad)
	for _, m := range bad {
		log.Error("sweeper: a count differs from its entities", "entityType", m.Key.EntityType, "userId", m.Key.UserID,
			"sum", m.Sum, "counted", m.Counted, "entitiesWithAFactTwice", m.Duplicated)
	}

	if res.PrunedEntities, err = store.PruneReadCounterEntities(ctx, batch, limit); err != nil {
		fail("pruning of read entities", err)
	}
	if res.PrunedNotifications, err = store.PruneCounterNotifications(ctx, cmp.Or(cfg.KeepPublished, time.Hour), batch, limit); err != nil {
		fail("pruning of notifications", err)
	}
	if res.Republished > 0 || res.PrunedEntities > 0 || res.PrunedNotifications > 0 {
		log.Info("sweeper: counters swept", "republished", res.Republished, "checked", res.Checked,
			"prunedEntities", res.PrunedEntities, "prunedNotifications", res.PrunedNotifications)
	}
	return res
}
