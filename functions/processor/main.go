// Command processor is the SQS-triggered Lambda: it processes queued events and reports per-message
// failures (the event source mapping needs ReportBatchItemFailures).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
)

func main() {
	cfg := config.Must(config.Load(os.Getenv))
	ctx := context.Background()
	log := cfg.Logger()
	p := &processing.Processor{Store: config.Must(cfg.OpenStore(ctx)), Logger: log,
		// Slow batches keep their messages invisible; the queue URL comes from QUEUE_URL or from
		// each record's eventSourceARN.
		Visibility: &sqsbatch.Visibility{Client: config.Must(config.SQS(log)), QueueURL: cfg.QueueURL}}
	lambda.Start(p.Handle)
}
