package sweeping

import (
	"context"
	"time"
)

// Backfiller gives the tasks stored before the reference directory existed (migration 0016) their
// entries, a unit of ids per transaction (taskstore's BackfillDirectory), and says when every task
// has them. A database created with the directory has nothing to backfill.
type Backfiller interface {
	BackfillDirectory(ctx context.Context, maxUnits int) (units int, done bool, err error)
}

// backfillUnitsPerRun is the most units one BackfillDirectory call walks: 100,000 ids.
const backfillUnitsPerRun = 100

// backfill walks the ids not backfilled yet within PackBudget (the pack's: the maintenance runs
// between an agent's batches) and the context's deadline, until the directory is complete. Its
// error is logged, and the next maintenance carries on where it stopped.
func (s *Sweeper) backfill(ctx context.Context) {
	b := s.stores.Backfiller
	if b == nil || s.backfilled.Load() {
		return
	}
	stop := time.Now().Add(s.cfg.PackBudget)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-s.cfg.StopBefore).Before(stop) {
		stop = dl.Add(-s.cfg.StopBefore)
	}
	var total int
	for time.Now().Before(stop) {
		units, done, err := b.BackfillDirectory(ctx, backfillUnitsPerRun)
		total += units
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("sweeper: backfilling the reference directory failed; it is tried again later", "units", total, "err", err)
			}
			return
		}
		if done {
			s.backfilled.Store(true)
			if total > 0 {
				s.cfg.Logger.Info("sweeper: the reference directory is complete", "units", total)
			}
			return
		}
		if units < backfillUnitsPerRun {
			return // another sweeper is backfilling
		}
	}
	if total > 0 {
		s.cfg.Logger.Info("sweeper: backfilled the reference directory", "units", total)
	}
}
