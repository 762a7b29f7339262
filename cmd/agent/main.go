// Command agent is the standalone agent: a long-running process that registers in the agents
// table, pulses, and processes the due events of its share of the hash space (internal/agents).
// Run as many as you like, anywhere that reaches the database: they split the events between them
// and take over the range of one that stops. With static sharding, SHARDS_ASSIGNED may list several
// shards ("0,2"): the process then runs one agent per shard. SIGTERM (or Ctrl-C): it finishes its batch, deletes
// its row and exits. Configuration is the same environment as the Lambdas (DB_DSN, SWEEP_GRACE,
// ...) and AGENT_* and SHARDS_* (README, "Agents").
package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/metrics/prom"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := wire.Must(config.LoadEnviron())
	log := wire.Logger(cfg)
	stores := wire.Must(wire.OpenStores(ctx, cfg))
	// Their metrics (label part="agent") on /metrics of METRICS_ADDR, when set.
	rec := wire.Must(prom.Serve(ctx, cfg.MetricsAddr, metrics.PartAgent, log))
	ctx = metrics.With(ctx, rec)
	// One agent per shard SHARDS_ASSIGNED lists (else one dynamic agent), each its own member, each
	// doing the sweeper's maintenance between its batches (the count's fold, pruning), each settling
	// its events as processed by "agent" (exactlyonce.ByAgent).
	var wg sync.WaitGroup
	for _, a := range wire.Must(wire.StandaloneAgents(ctx, cfg, stores, log)) {
		log.Info("agent: starting", "name", a.Member.Config().Name)
		go a.LogStatsEvery(ctx, time.Minute)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.Run(ctx)
		}()
	}
	wg.Wait()
	log.Info("agent: stopped")
}
