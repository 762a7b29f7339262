package local

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// DefaultMetricsAddr is where `make run` serves its Prometheus metrics (/metrics) when METRICS_ADDR
// is unset: 9464, the port OpenTelemetry's Prometheus exporter uses by default.
const DefaultMetricsAddr = "127.0.0.1:9464"

// Run is the local runner (cmd/local, which `make run` starts): it reads its configuration with
// getenv, logs to stdout, runs the whole system until ctx ends, and stops it. The database is
// DB_DSN's (default: config.LocalDSN, unless DB_HOST is set), the SQS endpoint the AWS
// configuration's (AWS_ENDPOINT_URL(_SQS)). An error is logged before it is returned.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	failed := func(err error) error {
		slog.New(slog.NewJSONHandler(stdout, nil)).Error("startup failed", "err", err)
		return err
	}
	cfg, err := config.Load(func(k string) string {
		if k == "DB_DSN" && getenv("DB_HOST") == "" {
			return cmp.Or(getenv(k), config.LocalDSN)
		}
		return getenv(k)
	})
	if err != nil {
		return failed(err)
	}
	if n := len(cfg.Agent.ShardsAssigned); n > 1 {
		return failed(fmt.Errorf("SHARDS_ASSIGNED lists %d shards: the local runner runs one sweeper agent; run cmd/agent (make agent) for several", n))
	}
	log := wire.NewLogger(stdout, cfg.LogLevel)

	// A database DB_DSN names that does not exist is created if the user may (and a log line says so).
	store, err := wire.OpenLocalStore(ctx, cfg, log)
	if err != nil {
		return failed(err)
	}
	log.Info("local: database ready", "allocator", cmp.Or(cfg.Store.Allocator, mysql.DefaultAllocator))
	client, err := wire.SQS(log)
	if err != nil {
		return failed(err)
	}
	opt := Env(cfg)
	opt.MetricsAddr = cmp.Or(opt.MetricsAddr, DefaultMetricsAddr) // METRICS_ADDR=off: none
	if opt.Sweep.Tasks, err = wire.Tasks(ctx, cfg, log); err != nil { // the processor and the sweeper agent deliver tasks
		return failed(err)
	}
	if opt.Queues, err = queue.Ensure(ctx, client, wire.LocalQueue(cfg.Local.QueueName)); err != nil {
		return failed(err)
	}
	awsCfg, err := wire.AWS()
	if err != nil {
		return failed(err)
	}
	if opt.Counters, err = EnsureCounters(ctx, client, awsCfg,
		cmp.Or(getenv("AWS_ENDPOINT_URL_SNS"), getenv("AWS_ENDPOINT_URL_SQS"), getenv("AWS_ENDPOINT_URL")), log); err != nil {
		return failed(err)
	}
	sys, err := Start(ctx, store, client, opt, log)
	if err != nil {
		return failed(err)
	}
	<-ctx.Done()
	log.Info("local: stopping")
	if err := sys.Wait(); err != nil {
		log.Error("local: stopped with an error", "err", err)
		return err
	}
	log.Info("local: stopped")
	return nil
}
