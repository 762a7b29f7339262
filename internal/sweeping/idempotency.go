package sweeping

import (
	"context"
	"time"
)

// KeyPruner is a store that deletes expired idempotency keys (internal/mysql/keystore).
type KeyPruner interface {
	PruneKeys(ctx context.Context, batch, limit int) (int, error)
}

// Pruning bounds: each DELETE removes at most pruneBatch expired keys (a short autocommit
// statement), and one sweep at most pruneLimit, so that a backlog (the first sweep after a long
// pause) is worked off over several sweeps instead of holding one up.
const (
	pruneBatch = 1000
	pruneLimit = 20000
)

// pruneKeys deletes expired idempotency keys after a sweep, if the sweeper has a KeyPruner, and if the
// deadline leaves time. A failure is logged and left to the next sweep: expired keys answer no
// request (every lookup says expires_at > now), they only take room.
func (s *Sweeper) pruneKeys(ctx context.Context) {
	p := s.stores.Keys
	if p == nil {
		return
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < s.cfg.StopBefore {
		return
	}
	n, err := p.PruneKeys(ctx, pruneBatch, pruneLimit)
	if err != nil {
		if ctx.Err() == nil { // a stop cut it short: not a failure
			s.cfg.Logger.Warn("sweeper: pruning expired idempotency keys failed; the next sweep tries again", "pruned", n, "err", err)
		}
		return
	}
	if n > 0 {
		s.cfg.Logger.Info("sweeper: pruned expired idempotency keys", "keys", n)
	}
}
