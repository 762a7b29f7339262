// Command sweeper is the scheduled Lambda: it processes pending events the queue path missed. Each
// invocation is an agent (internal/agents) for its whole duration, with the static shard of
// SWEEPER_SHARDS its input names ({"shard": i}), and hands its shard over to the next tick's
// invocation before its deadline (sweeping.Sweeper.HandleAgent; docs/deploy.md).
package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
)

func main() {
	cfg := wire.Must(wire.Environment())
	log := wire.Logger(cfg)
	// With its task deliveries and the counter service's sweep (its outbox, reconciliation, pruning).
	sc := wire.Must(delivery.SweeperConfig(context.Background(), cfg, log))
	stores := wire.Must(wire.OpenStores(context.Background(), cfg))
	lambda.Start(handler(stores, sc, os.Stdout, log))
}

// handler is the Lambda's handler: a sweeper agent per invocation (sweeping.Sweeper.HandleAgent)
// that writes one EMF line per invocation on out, the function's log group: CloudWatch turns it into
// the metrics the sweeper's alarms watch (infra/alarms.go), per function name. The sweeper writes
// its line itself, before its deadline's margin (sweeping.Metrics); wire.Invocation adds the
// request id to the log lines.
func handler(stores *wire.Stores, sc sweeping.Config, out io.Writer, log *slog.Logger) func(context.Context, sweeping.ShardInput) (sweeping.Result, error) {
	rec := metrics.NewRecorder(metrics.PartSweeper, true, nil)
	sc.Metrics = sweeping.Metrics{Out: out, Function: os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), Recorder: rec}
	return wire.Invocation(rec, nil, log, sweeping.New(stores.Sweeping(), sc).HandleAgent)
}
