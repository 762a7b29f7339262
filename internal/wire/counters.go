package wire

import (
	"fmt"
	"log/slog"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

// CounterPublisher returns where the counter service's notifications go, as c (config.Counter, read
// and checked with the rest of the configuration) says: the SNS topic COUNTER_TOPIC_ARN (AWS;
// locally the topic goaws serves), or else the SQS queue COUNTER_RESULTS_URL, or else nowhere (nil:
// they stay recorded, unpublished, and a sweeper that has a publisher publishes them).
func CounterPublisher(c config.Counter, log *slog.Logger) (counters.Publisher, error) {
	if arn := c.TopicARN; arn != "" {
		awsCfg, err := AWS()
		if err != nil {
			return nil, fmt.Errorf("AWS configuration for the counter topic: %w", err)
		}
		p := &counters.SNSPublisher{TopicARN: arn, AWS: awsCfg}
		if c.LocalTopic {
			p.Batch = counters.LocalSNSBatch
		}
		return p, nil
	}
	if url := c.ResultsURL; url != "" {
		client, err := SQS(log)
		if err != nil {
			return nil, err
		}
		return &counters.SQSPublisher{Client: client, QueueURL: url}, nil
	}
	return nil, nil
}

// CounterSweep returns the sweeper's counter sweep, publishing with CounterPublisher.
func CounterSweep(c config.Counter, log *slog.Logger) (*sweeping.Counters, error) {
	p, err := CounterPublisher(c, log)
	if err != nil {
		return nil, err
	}
	return &sweeping.Counters{Publisher: p}, nil
}
