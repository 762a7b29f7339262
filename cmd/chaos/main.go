// Command chaos runs the chaos run and prints its figures: concurrent sync and async creates
// through API processes built as `make run` builds its API, while the API, processor and sweeper
// processes are killed and restarted at random, a contender holds row locks past the lock wait
// timeout, the database is restarted, and poison messages are injected; then it checks that every
// event was processed exactly once and nothing was lost. It exits 1 on any violation.
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
	// The run starts this same executable again for each process.
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(chaos.RunProcess(role))
	}
	var cfg chaos.Config
	flag.DurationVar(&cfg.Duration, "duration", 0, "how long clients create events while things fail (default 60s)")
	flag.IntVar(&cfg.Clients, "clients", 0, "concurrent API clients (default 8)")
	flag.IntVar(&cfg.Processors, "processors", 0, "processor processes (default 2)")
	flag.IntVar(&cfg.Sweepers, "sweepers", 0, "sweeper processes (default 2)")
	flag.IntVar(&cfg.APIs, "apis", 0, "API processes, built as `make run` builds its API (default 1)")
	flag.IntVar(&cfg.Packers, "packers", 0, "processes folding and packing a unit or two at a time over and over, their packs dawdling (default 3; -1: none)")
	flag.DurationVar(&cfg.LateEvery, "late-every", 0, "mean pause between two rounds of creates with ids taken long before (default 100ms; -1ns: none)")
	flag.IntVar(&cfg.Contenders, "contenders", 0, "processes holding row locks past the lock wait timeout, to provoke retries (default 1; -1: none)")
	flag.IntVar(&cfg.LockWaitTimeout, "lock-wait-timeout", 0, "innodb_lock_wait_timeout of every session, in seconds (default 1)")
	flag.BoolVar(&cfg.RequireRetries, "require-retries", false, "fail the run if no transaction was retried (the retry helper's retry branch did not run)")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 0, "mean pause between two kills of a processor, sweeper or API (default 1.5s)")
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
