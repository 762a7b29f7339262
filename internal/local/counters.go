package local

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// Counters is the counter service of a local run: its queue (and DLQ), polled by the counter
// consumer, and where its notifications go.
type Counters struct {
	Queues queue.Queues
	// Publisher publishes the notifications: through the topic counter-results to the queue
	// counter-results when the local endpoint serves SNS (goaws does), else to the queue directly.
	Publisher counters.Publisher
	// ResultsURL is the counter-results queue, for the log.
	ResultsURL string
}

// EnsureCounters creates the counter service's queues, counters (with counters-dlq, redrive after
// 5 receives, as deployed) and counter-results, and the topic counter-results subscribed by that
// queue, on the local endpoints: client's for the queues, snsEndpoint (signed with awsCfg) for the
// topic.
func EnsureCounters(ctx context.Context, client *sqs.Client, awsCfg aws.Config, snsEndpoint string, log *slog.Logger) (*Counters, error) {
	in, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "counters", VisibilityTimeout: 30, MaxReceiveCount: 5})
	if err != nil {
		return nil, fmt.Errorf("counters queue: %w", err)
	}
	results, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "counter-results", VisibilityTimeout: 30, MaxReceiveCount: 5})
	if err != nil {
		return nil, fmt.Errorf("counter-results queue: %w", err)
	}
	c := &Counters{Queues: in, ResultsURL: results.URL,
		Publisher: &counters.SQSPublisher{Client: client, QueueURL: results.URL}}
	sns := &counters.SNSPublisher{AWS: awsCfg, Endpoint: snsEndpoint, Batch: counters.LocalSNSBatch}
	arn, err := sns.CreateTopic(ctx, "counter-results")
	if err == nil {
		sns.TopicARN = arn
		err = sns.SubscribeQueue(ctx, results.ARN)
	}
	if err != nil {
		log.Warn("local: no SNS topic on the local endpoint; counter notifications go to the queue directly", "err", err)
		return c, nil
	}
	c.Publisher = sns
	log.Info("local: counter notifications published to a topic", "topic", arn, "subscribed", results.URL)
	return c, nil
}

// startCounters builds the counter consumer's mapping and gives the sweeper the counter sweep (nil
// when the run has no counters).
func startCounters(stores *wire.Stores, client *sqs.Client, opt *Options, rec *metrics.Recorder, log *slog.Logger) *mapping.Mapping {
	c := opt.Counters
	if c == nil {
		return nil
	}
	opt.Sweep.Counters = &sweeping.Counters{Publisher: c.Publisher}
	consumer := wire.CounterConsumer(stores, c.Publisher, &sqsbatch.Visibility{Client: client, QueueURL: c.Queues.URL}, log)
	consumer.Metrics = rec
	// MAPPING_CONCURRENCY=0 turns the events' queue consumer off, not the counter service's: it then
	// polls with mapping's default concurrency.
	concurrency := 0
	if mc := opt.MappingConcurrency; mc != nil {
		concurrency = *mc
	}
	m := mapping.New(client, consumer.Handle, mapping.Config{QueueURL: c.Queues.URL, QueueARN: c.Queues.ARN,
		BatchSize: opt.MappingBatchSize, Concurrency: concurrency, Timeout: opt.ProcessorTimeout, Logger: log})
	log.Info("local: counter consumer polling", "queue", c.Queues.URL, "dlq", c.Queues.DLQURL,
		"results", c.ResultsURL, "concurrency", m.Config().Concurrency)
	return m
}

// runCounters runs the counter consumer's mapping until ctx ends.
func runCounters(ctx context.Context, wg *sync.WaitGroup, m *mapping.Mapping) {
	if m == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = m.Run(ctx)
	}()
}
