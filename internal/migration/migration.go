// Package migration is the deploy-time schema step: apply the embedded migrations, then verify the
// schema rules (no keys, indexes, auto-increment, triggers, routines, views, scheduled events or
// sequences), and fail loudly otherwise.
package migration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// Handler is the migrate Lambda's handler.
type Handler struct {
	// Open opens the store without migrating.
	Open   func(context.Context) (*mysql.DB, error)
	Logger *slog.Logger
	// Users are the functions' database users, created if missing and granted their privileges
	// after every migration (mysql.EnsureUsers). Empty: none (local runs, LocalStack).
	Users []mysql.FunctionUser
	// While the database is unreachable, Handle retries: a new RDS Proxy takes minutes after it is
	// created before it hands out connections, and the deploy-time trigger may run in that window.
	// Backoff starts at FirstBackoff (default 1 s) and doubles up to MaxBackoff (default 15 s); it
	// gives up when less than StopBefore (default 10 s) plus the next backoff is left before the
	// context's deadline (or after MaxAttempts, default unlimited, when the context has none).
	FirstBackoff, MaxBackoff, StopBefore time.Duration
	MaxAttempts                          int
	// OnRetry, if set, is called after each failed attempt that will be retried.
	OnRetry func(attempt int, err error)
}

// Result is what the invocation returns to the deployment.
type Result struct {
	Version  int `json:"version"`
	Attempts int `json:"attempts"`
}

// Handle applies the migrations and verifies the rules. Any error fails the invocation, and so the
// CDK Trigger, and so the deployment. An unreachable database is retried; a broken rule is not.
func (h *Handler) Handle(ctx context.Context, _ json.RawMessage) (Result, error) {
	db, err := h.Open(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("open database: %w", err)
	}
	backoff := cmp.Or(h.FirstBackoff, time.Second)
	for attempt := 1; ; attempt++ {
		err := migrate(ctx, db, h.Users)
		if err == nil {
			h.Logger.InfoContext(ctx, "migrate: schema current, rules hold", "version", mysql.LatestVersion(), "attempts", attempt)
			return Result{Version: mysql.LatestVersion(), Attempts: attempt}, nil
		}
		if !mysql.IsUnavailable(err) || !h.mayRetry(ctx, attempt, backoff) {
			return Result{Attempts: attempt}, err
		}
		h.Logger.WarnContext(ctx, "migrate: database unreachable; retrying", "attempt", attempt, "in", backoff.String(), "err", err)
		if h.OnRetry != nil {
			h.OnRetry(attempt, err)
		}
		select {
		case <-ctx.Done():
			return Result{Attempts: attempt}, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, cmp.Or(h.MaxBackoff, 15*time.Second))
	}
}

func (h *Handler) mayRetry(ctx context.Context, attempt int, backoff time.Duration) bool {
	if h.MaxAttempts > 0 && attempt >= h.MaxAttempts {
		return false
	}
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl) > backoff+cmp.Or(h.StopBefore, 10*time.Second)
	}
	return true
}

func migrate(ctx context.Context, db *mysql.DB, users []mysql.FunctionUser) error {
	if err := mysql.Migrate(ctx, db.Pool()); err != nil {
		return err
	}
	if err := mysql.EnsureUsers(ctx, db.Pool(), users); err != nil {
		return err
	}
	violations, err := mysql.CheckRules(ctx, db.Pool())
	if err != nil {
		return err
	}
	if len(violations) > 0 {
		return fmt.Errorf("schema rules broken: %s", strings.Join(violations, "; "))
	}
	return nil
}
