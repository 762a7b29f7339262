// Command local runs the whole system on one machine: the API on HTTP_ADDR, the processor behind a
// local SQS event source mapping, and the sweeper on a schedule, against the database in DB_DSN and
// the SQS endpoint in AWS_ENDPOINT_URL(_SQS). `make run` starts MariaDB and a local SQS first.
package main

import (
	"cmp"
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

const defaultDSN = "exactlyonce:exactlyonce@tcp(127.0.0.1:3306)/exactlyonce"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	getenv := func(k string) string {
		if k == "DB_DSN" && os.Getenv("DB_HOST") == "" {
			return cmp.Or(os.Getenv(k), defaultDSN)
		}
		return os.Getenv(k)
	}
	cfg := config.Must(config.Load(getenv))
	log := cfg.Logger()
	opt := config.Must(local.Env(os.Getenv))
	opt.Sweep = sweeping.Config{BatchSize: cfg.SweepBatchSize, Grace: cfg.SweepGrace, Logger: log}

	store := config.Must(cfg.OpenStore(ctx))
	log.Info("local: database ready", "allocator", cmp.Or(cfg.Store.Allocator, "block"))
	client := config.Must(config.SQS(log))
	queues := config.Must(queue.Ensure(ctx, client, queue.QueueSpec{
		Name: cmp.Or(os.Getenv("QUEUE_NAME"), "events"), VisibilityTimeout: 30, MaxReceiveCount: 5,
	}))
	opt.Queues = queues
	sys := config.Must(local.Start(ctx, store, client, opt, log))
	<-ctx.Done()
	log.Info("local: stopping")
	if err := sys.Wait(); err != nil {
		log.Error("local: stopped with an error", "err", err)
		os.Exit(1)
	}
	log.Info("local: stopped")
}
