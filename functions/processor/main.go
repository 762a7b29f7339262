// Command processor is the SQS-triggered Lambda: it processes queued events and reports per-message
// failures (the event source mapping needs ReportBatchItemFailures).
package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
)

func main() {
	cfg := wire.Must(wire.Environment())
	log := wire.Logger(cfg)
	stores := wire.Must(wire.OpenStores(context.Background(), cfg))
	p := wire.Must(wire.Processor(stores,
		// Tasks are delivered with the signing secret of WEBHOOK_SECRET_ARN, read once here.
		processing.Engine{Logger: log, Tasks: wire.Must(delivery.Tasks(context.Background(), cfg, log))},
		// Slow batches keep their messages invisible; the queue URL comes from QUEUE_URL or from
		// each record's eventSourceARN.
		wire.Visibility(cfg, wire.SQSOnFirstUse(log)), // its client built at the first extension
		// The tasks it delivers join event workers of its own: the container registers as an agent
		// without a range at its first batch, pulses while a batch runs, and expires once frozen
		// for good, when the sweepers adopt what its workers still hold.
		wire.ProcessorEventWorkers(cfg, log)))
	lambda.Start(handler(p, os.Stdout, log))
}

// handler is the Lambda's handler: p's, its metrics recorded for one EMF line per invocation on
// out (wire.Invocation).
func handler(p *processing.Processor, out io.Writer, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return wire.Invocation(metrics.NewRecorder(metrics.PartProcessor, true, nil), out, log, p.Handle)
}
