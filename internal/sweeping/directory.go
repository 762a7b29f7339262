package sweeping

import (
	"context"
	"time"
)

// Directory is the reference directory's upkeep (taskstore's): BackfillDirectory gives the tasks
// stored before the directory existed (migration 0016) their entries, a unit of ids per transaction,
// and says when every task has them (a database created with the directory has nothing to
// backfill); CompactDirectory moves what creates logged (migration 0018) into the directory's
// cells, a task bucket at a time, until every slot that had a log is done or until is passed, and
// says how many log rows it moved.
type Directory interface {
	BackfillDirectory(ctx context.Context, maxUnits int) (units int, done bool, err error)
	CompactDirectory(ctx context.Context, until time.Time) (int, error)
}

// compactDirectory runs the directory's compaction within PackBudget (the maintenance runs between
// an agent's batches) and the context's deadline. The log is what a reference's listing reads
// besides its cell, so its size is set by how often this runs. Its error is logged, and the next
// maintenance carries on.
func (s *Sweeper) compactDirectory(ctx context.Context) {
	d := s.stores.Directory
	if d == nil {
		return
	}
	moved, err := d.CompactDirectory(ctx, s.budgetEnd(ctx))
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("sweeper: compacting the reference directory failed; it is tried again later", "rows", moved, "err", err)
		}
		return
	}
	if moved > 0 {
		s.cfg.Logger.Debug("sweeper: compacted the reference directory", "rows", moved)
	}
}

// budgetEnd is when a maintenance step that starts now stops starting transactions: PackBudget
// from now, or StopBefore ahead of the context's deadline if that comes first.
func (s *Sweeper) budgetEnd(ctx context.Context) time.Time {
	stop := time.Now().Add(s.cfg.PackBudget)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-s.cfg.StopBefore).Before(stop) {
		stop = dl.Add(-s.cfg.StopBefore)
	}
	return stop
}

// backfillUnitsPerRun is the most units one BackfillDirectory call walks: 100,000 ids.
const backfillUnitsPerRun = 100

// backfill walks the ids not backfilled yet within PackBudget (the pack's: the maintenance runs
// between an agent's batches) and the context's deadline, until the directory is complete. Its
// error is logged, and the next maintenance carries on where it stopped.
func (s *Sweeper) backfill(ctx context.Context) {
	b := s.stores.Directory
	if b == nil || s.backfilled.Load() {
		return
	}
	stop := s.budgetEnd(ctx)
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
