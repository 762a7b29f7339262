// Command counter is the counter service's SQS-triggered Lambda: it applies counter messages to
// the counts, exactly once each, reports per-message failures (the event source mapping needs
// ReportBatchItemFailures), and publishes a result notification per message to the topic
// COUNTER_TOPIC_ARN (internal/counters).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	cfg := wire.Must(wire.Environment())
	log := wire.Logger(cfg)
	c := wire.CounterConsumer(wire.Must(wire.OpenStores(context.Background(), cfg)), wire.Must(wire.CounterPublisher(cfg.Counter, log)),
		// Slow batches keep their messages invisible; the queue URL comes from QUEUE_URL or from
		// each record's eventSourceARN.
		wire.Visibility(cfg, wire.SQSOnFirstUse(log)), log) // its client built at the first extension
	// One EMF line per invocation on stdout (wire.Invocation).
	lambda.Start(wire.Invocation(metrics.NewRecorder(metrics.PartCounter, true, nil), os.Stdout, log, c.Handle))
}
