// Command chaos runs the chaos run and prints its figures: concurrent sync and async creates
// through the API while processor and sweeper processes are killed and restarted at random, the
// database is restarted, and poison messages are injected; then it checks that every event was
// processed exactly once and nothing was lost. It exits 1 on any violation.
//
//	make chaos                       # the long form
//	make chaos-short                 # the short form `make test` also runs
//	bin/chaos -duration 5m -seed 42  # by hand
//
// It needs MariaDB installed (it starts a private server; `make db` installs it) and bin/sqslocal
// (`make sqslocal`), unless AWS_ENDPOINT_URL_SQS names an SQS endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/chaos"
	"github.com/exactlyonce/exactlyonce/internal/child"
	drv "github.com/go-sql-driver/mysql"
)

func main() {
	// The run starts this same executable again for each worker process.
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(chaos.RunWorker(role))
	}
	var cfg chaos.Config
	flag.DurationVar(&cfg.Duration, "duration", 0, "how long clients create events while things fail (default 60s)")
	flag.IntVar(&cfg.Clients, "clients", 0, "concurrent API clients (default 8)")
	flag.IntVar(&cfg.Processors, "processors", 0, "processor processes (default 2)")
	flag.IntVar(&cfg.Sweepers, "sweepers", 0, "sweeper processes (default 2)")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 0, "mean pause between two worker kills (default 1.5s)")
	flag.IntVar(&cfg.DBRestarts, "db-restarts", 0, "database restarts, alternately stopped and killed (default 2)")
	flag.IntVar(&cfg.Poison, "poison", 0, "malformed messages injected (default 6)")
	flag.IntVar(&cfg.Visibility, "visibility", 0, "the queue's visibility timeout in seconds (default 3)")
	flag.IntVar(&cfg.MaxReceive, "max-receive", 0, "receives before a message moves to the DLQ (default 10)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the kill schedule (default random)")
	flag.Parse()
	_ = drv.SetLogger(stdlog.New(io.Discard, "", 0)) // connections the run cuts are expected
	cfg.SQSEndpoint = os.Getenv("AWS_ENDPOINT_URL_SQS")
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	fmt.Print(rep)
	if !rep.OK() {
		os.Exit(1)
	}
}
