// Command sweeper is the scheduled Lambda: it processes pending events the queue path missed, and
// stops before its deadline.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

func main() {
	cfg := config.Must(config.Load(os.Getenv))
	s := sweeping.New(config.Must(cfg.OpenStore(context.Background())), sweeping.Config{
		BatchSize: cfg.SweepBatchSize, Grace: cfg.SweepGrace, Logger: cfg.Logger(),
		// One EMF line per invocation on stdout, the function's log group: CloudWatch turns it into
		// the metrics the sweeper's alarms watch (infra/alarms.go), per function name.
		Metrics: sweeping.Metrics{Out: os.Stdout, Function: os.Getenv("AWS_LAMBDA_FUNCTION_NAME")},
	})
	lambda.Start(s.Handle)
}
