package sweeping

import (
	"context"
	"time"
)

// Folder keeps the count of events exact at a cost that does not grow with history: it moves
// settled events into the counted partition and adds them to the count, a bounded batch per
// transaction (eventstore's FoldSettled, migrations/0005_settled_count.sql). GET /events then scans
// only what is pending and what was settled since the last fold. The sweeper folds in its
// maintenance (Maintain: at the end of a Sweep, and between an agent's batches at most every
// Config.MaintainEvery) when it has a Folder (Stores.Folder).
type Folder interface {
	FoldSettled(ctx context.Context, limit int) (int64, error)
}

// fold folds settled events in batches until a batch comes back short (nothing is left that was
// settled before it looked) or the context's deadline is near, and returns how many it folded.
func (s *Sweeper) fold(ctx context.Context) (int64, error) {
	f := s.stores.Folder
	if f == nil {
		return 0, nil
	}
	return s.untilShort(ctx, s.cfg.FoldBatch, func() (int64, int64, error) {
		n, err := f.FoldSettled(ctx, s.cfg.FoldBatch)
		return n, n, err
	})
}

// untilShort runs step, which asks for full things and says how many it got and how many events
// that made, until it gets fewer than full (nothing is left), fails, or the context's deadline is
// near; it returns the events.
func (s *Sweeper) untilShort(ctx context.Context, full int, step func() (got, events int64, err error)) (int64, error) {
	var total int64
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < s.cfg.StopBefore {
			return total, nil
		}
		got, n, err := step()
		total += n
		if err != nil || got < int64(full) {
			return total, err
		}
	}
}

// Packer packs folded events out of the events table into pages of ten thousand ids, a unit of a
// thousand ids at a time (pagestore's PackPages), so that reading an old event scans one
// small partition instead of a share of the history. The sweeper packs after it folds when it has
// a Packer (Stores.Packer). A pack starts no transaction after its budget (but always one).
type Packer interface {
	PackPages(ctx context.Context, maxUnits int, budget time.Duration) (units, events int64, err error)
}

// packUnitsPerRun is the most units one pack call looks at: 1,000,000 events. A history being
// packed for the first time (after migration 0012) is packed over several calls, and runs.
const packUnitsPerRun = 1000

// pack packs what can be packed until a run comes back short, or PackBudget is spent, or the
// context's deadline is near, and returns how many events it packed.
func (s *Sweeper) pack(ctx context.Context) (int64, error) {
	p := s.stores.Packer
	if p == nil {
		return 0, nil
	}
	stop := time.Now().Add(s.cfg.PackBudget)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-s.cfg.StopBefore).Before(stop) {
		stop = dl.Add(-s.cfg.StopBefore)
	}
	var total int64
	for time.Now().Before(stop) {
		units, n, err := p.PackPages(ctx, packUnitsPerRun, time.Until(stop))
		total += n
		if err != nil || units < packUnitsPerRun {
			return total, err
		}
	}
	return total, nil
}
