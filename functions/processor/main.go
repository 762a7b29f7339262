// Command processor is the SQS-triggered Lambda: it processes queued events and reports per-message
// failures (the event source mapping needs ReportBatchItemFailures).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	cfg := wire.Must(config.Load(os.Getenv))
	log := wire.Logger(cfg)
	p := &processing.Processor{Store: wire.Must(wire.OpenStore(context.Background(), cfg)), Logger: log,
		// Tasks are delivered with the signing secret of WEBHOOK_SECRET_ARN, read once here.
		Tasks: wire.Must(wire.Tasks(context.Background(), cfg, log)),
		// Slow batches keep their messages invisible; the queue URL comes from QUEUE_URL or from
		// each record's eventSourceARN.
		Visibility: wire.Visibility(cfg, wire.Must(wire.SQS(log)))}
	lambda.Start(p.Handle)
}
