// Package migration is the deploy-time schema step: apply the embedded migrations, then verify the
// schema rules (no keys, indexes, auto-increment, triggers or routines), and fail loudly otherwise.
package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// Handler is the migrate Lambda's handler.
type Handler struct {
	// Open opens the store without migrating.
	Open   func(context.Context) (*mysql.Store, error)
	Logger *slog.Logger
}

// Result is what the invocation returns to the deployment.
type Result struct {
	Version int `json:"version"`
}

// Handle applies the migrations and verifies the rules. Any error fails the invocation, and so the
// CDK Trigger, and so the deployment.
func (h *Handler) Handle(ctx context.Context, _ json.RawMessage) (Result, error) {
	store, err := h.Open(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("open database: %w", err)
	}
	if err := mysql.Migrate(ctx, store.DB()); err != nil {
		return Result{}, err
	}
	violations, err := mysql.CheckRules(ctx, store.DB())
	if err != nil {
		return Result{}, err
	}
	if len(violations) > 0 {
		return Result{}, fmt.Errorf("schema rules broken: %s", strings.Join(violations, "; "))
	}
	h.Logger.Info("migrate: schema current, rules hold", "version", mysql.LatestVersion())
	return Result{Version: mysql.LatestVersion()}, nil
}
