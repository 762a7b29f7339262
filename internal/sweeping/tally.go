package sweeping

import "context"

// TallyBase derives, once, the base of the events' count (migration 0018): the events created
// before every create added itself to the tally. Until it is derived, GET /events counts by a scan
// of what is not folded (eventstore's DeriveTallyBase and Count).
type TallyBase interface {
	DeriveTallyBase(ctx context.Context) (known bool, err error)
}

// deriveTallyBase derives the base if it is not known yet and may be (15 minutes after the
// migration on a database with history: the API of the version before it may still be creating
// events without tallying them). Its error is logged, and the next maintenance tries again.
func (s *Sweeper) deriveTallyBase(ctx context.Context) {
	t := s.stores.Tally
	if t == nil || s.tallied.Load() {
		return
	}
	known, err := t.DeriveTallyBase(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("sweeper: deriving the events' count base failed; it is tried again later", "err", err)
		}
		return
	}
	s.tallied.Store(known)
}
