// Command local runs the whole system on one machine (local.Run): the API on HTTP_ADDR, the
// processor behind a local SQS event source mapping, and the sweeper as an agent, against the
// database in DB_DSN (default: config.LocalDSN, unless DB_HOST is set) and the SQS endpoint in
// AWS_ENDPOINT_URL(_SQS). `make run` starts MariaDB and a local SQS first.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/local"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := local.RunEnviron(ctx, os.Stdout) // logs its error
	stop()
	if err != nil {
		os.Exit(1)
	}
}
