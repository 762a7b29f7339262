// Command worker is the sweeper as a standalone, long-running worker loop (the seed's worker): it
// processes due pending events and, when none are due, sleeps about 1 s plus up to 0.5 s of jitter.
// Run as many as you like, anywhere that reaches the database: SKIP LOCKED keeps them apart.
// Configuration is the same environment as the Lambdas (DB_DSN, SWEEP_BATCH_SIZE, SWEEP_GRACE, ...).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config.Must(config.Load(os.Getenv))
	log := cfg.Logger()
	s := sweeping.New(config.Must(cfg.OpenStore(ctx)), sweeping.Config{
		BatchSize: cfg.SweepBatchSize, Grace: cfg.SweepGrace, Logger: log,
	})
	log.Info("worker: sweeping", "batch", cfg.SweepBatchSize, "grace", cfg.SweepGrace.String())
	_ = s.Run(ctx)
	log.Info("worker: stopped")
}
