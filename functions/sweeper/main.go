// Command sweeper is the scheduled Lambda: it processes pending events the queue path missed. Each
// invocation is an agent (internal/agents) for its whole duration, with the static shard of
// SWEEPER_SHARDS its input names ({"shard": i}), and hands its shard over to the next tick's
// invocation before its deadline (sweeping.Sweeper.HandleAgent; docs/deploy.md).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	cfg := wire.Must(config.Load(os.Getenv))
	sc := wire.Sweeping(cfg, wire.Logger(cfg))
	// One EMF line per invocation on stdout, the function's log group: CloudWatch turns it into the
	// metrics the sweeper's alarms watch (infra/alarms.go), per function name.
	sc.Metrics = sweeping.Metrics{Out: os.Stdout, Function: os.Getenv("AWS_LAMBDA_FUNCTION_NAME")}
	sc.Counters = wire.Must(wire.CounterSweep(wire.Logger(cfg))) // the counter service's outbox, reconciliation, pruning
	store := wire.Must(wire.OpenStore(context.Background(), cfg))
	sc.AgentStore = store
	sc.Tasks = wire.Must(wire.Tasks(context.Background(), cfg, wire.Logger(cfg)))
	s := sweeping.New(store, sc)
	lambda.Start(s.HandleAgent)
}
