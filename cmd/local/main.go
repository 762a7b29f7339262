// Command local runs the whole system on one machine: the API on HTTP_ADDR, the processor behind a
// local SQS event source mapping, and the sweeper on a schedule, against the database in DB_DSN
// (default: config.LocalDSN, unless DB_HOST is set) and the SQS endpoint in AWS_ENDPOINT_URL(_SQS).
// `make run` starts MariaDB and a local SQS first.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// DefaultMetricsAddr is where `make run` serves its Prometheus metrics (/metrics) when METRICS_ADDR
// is unset: 9464, the port OpenTelemetry's Prometheus exporter uses by default.
const DefaultMetricsAddr = "127.0.0.1:9464"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	getenv := func(k string) string {
		if k == "DB_DSN" && os.Getenv("DB_HOST") == "" {
			return cmp.Or(os.Getenv(k), config.LocalDSN)
		}
		return os.Getenv(k)
	}
	cfg := wire.Must(config.Load(getenv))
	if n := len(cfg.Agent.ShardsAssigned); n > 1 {
		wire.Must(0, fmt.Errorf("SHARDS_ASSIGNED lists %d shards: the local runner runs one sweeper agent; run cmd/agent (make agent) for several", n))
	}
	log := wire.Logger(cfg)

	// A database DB_DSN names that does not exist is created if the user may (and a log line says so).
	store := wire.Must(wire.OpenLocalStore(ctx, cfg, log))
	log.Info("local: database ready", "allocator", cmp.Or(cfg.Store.Allocator, mysql.DefaultAllocator))
	client := wire.Must(wire.SQS(log))
	opt := local.Env(cfg)
	opt.MetricsAddr = cmp.Or(opt.MetricsAddr, DefaultMetricsAddr) // METRICS_ADDR=off: none
	opt.Sweep.Tasks = wire.Must(wire.Tasks(ctx, cfg, log))        // the processor and the sweeper agent deliver tasks
	opt.Queues = wire.Must(queue.Ensure(ctx, client, wire.LocalQueue(cfg.Local.QueueName)))
	opt.Counters = wire.Must(local.EnsureCounters(ctx, client, wire.Must(wire.AWS()),
		cmp.Or(os.Getenv("AWS_ENDPOINT_URL_SNS"), os.Getenv("AWS_ENDPOINT_URL_SQS"), os.Getenv("AWS_ENDPOINT_URL")), log))
	sys := wire.Must(local.Start(ctx, store, client, opt, log))
	<-ctx.Done()
	log.Info("local: stopping")
	if err := sys.Wait(); err != nil {
		log.Error("local: stopped with an error", "err", err)
		os.Exit(1)
	}
	log.Info("local: stopped")
}
