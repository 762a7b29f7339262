// Command worker is the sweeper as a standalone, long-running worker loop (the seed's worker): it
// processes due pending events and, when none are due, sleeps about 1 s plus up to 0.5 s of jitter.
// Run as many as you like, anywhere that reaches the database: SKIP LOCKED keeps them apart.
// Configuration is the same environment as the Lambdas (DB_DSN, SWEEP_BATCH_SIZE, SWEEP_GRACE, ...).
package main

import (
	"cmp"
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := wire.Must(config.Load(os.Getenv))
	log := wire.Logger(cfg)
	s := sweeping.New(wire.Must(wire.OpenStore(ctx, cfg)), wire.Sweeping(cfg, log))
	grace := "default"
	if g := cfg.Sweep.Grace; g != nil {
		grace = g.String()
	}
	log.Info("worker: sweeping", "batch", cmp.Or(cfg.Sweep.BatchSize, sweeping.DefaultBatchSize), "grace", grace)
	_ = s.Run(ctx)
	log.Info("worker: stopped")
}
