// Command agent is the standalone agent: a long-running process that registers in the agents
// table, pulses, and processes the due events of its share of the hash space (internal/agents).
// Run as many as you like, anywhere that reaches the database: they split the events between them
// and take over the range of one that stops. With static sharding, SHARDS_ASSIGNED may list several
// shards ("0,2"): the process then runs one agent per shard. SIGTERM (or Ctrl-C): it finishes its batch, deletes
// its row and exits. Configuration is the same environment as the Lambdas (DB_DSN, SWEEP_GRACE,
// ...) and AGENT_* and SHARDS_* (docs/agents.md). With -local (`make agent`), the database is read as
// `make run` reads it (config.LocalGetenv): DB_NAME=newcomer make agent joins DB_NAME=newcomer make run.
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/metrics/prom"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	getenv, err := environment(os.Args[1:], os.LookupEnv)
	if err != nil {
		os.Exit(2) // the flag package has said why
	}
	if err := run(ctx, getenv, os.Environ(), os.Stdout); err != nil {
		os.Exit(1)
	}
}

// environment is how the agent reads the environment lookup gives (os.LookupEnv), as its flags
// (args) say: with -local, config.LocalGetenv's reading, and the tasks delivered as `make run`
// delivers them (localWebhooks).
func environment(args []string, lookup func(string) (string, bool)) (func(string) string, error) {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	local := fs.Bool("local", false, "read the database as `make run` does: without DB_DSN and DB_HOST, "+
		"make run's database (config.LocalDSN), with DB_NAME, DB_PORT, DB_USER and DB_PASSWORD put in (what `make agent` runs)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *local {
		return localWebhooks(config.LocalGetenv(getenv), lookup), nil
	}
	return getenv, nil
}

// localWebhooks reads getenv as scripts/run.sh sets up `make run`: without WEBHOOK_SECRET and
// WEBHOOK_SECRET_ARN (or with them set to nothing, which for a string means none),
// WEBHOOK_SECRET is the development secret (config.LocalWebhookSecret), and with
// WEBHOOK_ALLOW_LOOPBACK unset (lookup says), deliveries may go to loopback. An agent that delivers
// no task still takes its share of the hash ranges, so a `make agent` without them left the tasks
// of its range undelivered for as long as it ran. WEBHOOK_ALLOW_LOOPBACK set to nothing is left as
// it is, for Load to refuse as it refuses every true/false set to nothing: read as unset, it
// allowed loopback, where it said nothing of the kind.
func localWebhooks(getenv func(string) string, lookup func(string) (string, bool)) func(string) string {
	set := func(k string) bool { return strings.TrimSpace(getenv(k)) != "" }
	devSecret := !set("WEBHOOK_SECRET") && !set("WEBHOOK_SECRET_ARN")
	_, isSet := lookup("WEBHOOK_ALLOW_LOOPBACK")
	loopback := !isSet
	return func(k string) string {
		switch {
		case k == "WEBHOOK_SECRET" && devSecret:
			return config.LocalWebhookSecret
		case k == "WEBHOOK_ALLOW_LOOPBACK" && loopback:
			return "true"
		}
		return getenv(k)
	}
}

// run reads the configuration with getenv and runs the agents until ctx ends; a start-up error is
// logged ("startup failed") and returned. environ, when not nil, is the environment getenv reads
// (config.LoadEnvironOf: a variable set to nothing, or unknown, is refused).
func run(ctx context.Context, getenv func(string) string, environ []string, stdout io.Writer) error {
	failed := func(err error) error {
		slog.New(slog.NewJSONHandler(stdout, nil)).Error("startup failed", "err", err)
		return err
	}
	cfg, err := config.LoadEnvironOf(getenv, environ)
	if err != nil {
		return failed(err)
	}
	log := wire.NewLogger(stdout, cfg.LogLevel)
	stores, err := wire.OpenStores(ctx, cfg)
	if err != nil {
		return failed(err)
	}
	defer stores.DB.Pool().Close()
	// Their metrics (label part="agent") on /metrics of METRICS_ADDR, when set.
	rec, err := prom.Serve(ctx, cfg.MetricsAddr, metrics.PartAgent, log)
	if err != nil {
		return failed(err)
	}
	ctx = metrics.With(ctx, rec)
	// One agent per shard SHARDS_ASSIGNED lists (else one dynamic agent), each its own member, each
	// doing the sweeper's maintenance between its batches (the count's fold, pruning), each settling
	// its events as processed by "agent" (exactlyonce.ByAgent).
	all, err := delivery.StandaloneAgents(ctx, cfg, stores, log)
	if err != nil {
		return failed(err)
	}
	var wg sync.WaitGroup
	for _, a := range all {
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
	return nil
}
