package sweeping

import (
	"context"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// DefaultRetention is Config.Retention's default: pages whose newest event is older move to the
// archive (docs/history.md says why two hours: the window then holds about 7,200,000 events at
// 1,000 events/s, inside the flat region of the page rows' reads).
const DefaultRetention = 2 * time.Hour

// Archiver moves pages of the packed history older than the retention window to the archive's
// bucket (pagestore's ArchivePages): one object a page, written and read back before the
// page's rows are deleted. The sweeper moves after it packs when it has an Archiver
// (Stores.Archiver); one with no bucket configured moves nothing.
type Archiver interface {
	ArchivePages(ctx context.Context, retention, budget time.Duration) (exactlyonce.ArchiveResult, error)
}

// archive moves what is due within ArchiveBudget (and before the context's deadline), and logs
// what it moved.
func (s *Sweeper) archive(ctx context.Context) {
	a := s.stores.Archiver
	if a == nil {
		return
	}
	budget := s.cfg.ArchiveBudget
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-s.cfg.StopBefore)
	}
	if budget <= 0 {
		return
	}
	res, err := a.ArchivePages(ctx, s.retention, budget)
	switch {
	case err != nil && ctx.Err() == nil:
		s.cfg.Logger.Warn("sweeper: moving pages to the archive failed; it is tried again later", "pages", res.Pages, "err", err)
	case res.Pages+res.Markers > 0:
		s.cfg.Logger.Info("sweeper: moved pages to the archive", "pages", res.Pages, "events", res.Events, "bytes", res.Bytes,
			"markers", res.Markers)
	}
	if res.Skipped > 0 {
		s.cfg.Logger.Warn("sweeper: pages too large to archive stay in the database", "pages", res.Skipped)
	}
}
