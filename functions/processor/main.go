// Command processor is the SQS-triggered Lambda: it processes queued events and reports per-message
// failures (the event source mapping needs ReportBatchItemFailures).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/processing"
)

func main() {
	cfg := config.Must(config.Load(os.Getenv))
	p := &processing.Processor{Store: config.Must(cfg.OpenStore(context.Background())), Logger: cfg.Logger()}
	lambda.Start(p.Handle)
}
