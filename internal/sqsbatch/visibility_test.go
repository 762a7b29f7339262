package sqsbatch_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/stretchr/testify/require"
)

func TestQueueURLFromARN(t *testing.T) {
	t.Parallel()
	for arn, want := range map[string]string{
		"arn:aws:sqs:eu-west-1:123456789012:events":      "https://sqs.eu-west-1.amazonaws.com/123456789012/events",
		"arn:aws-cn:sqs:cn-north-1:123456789012:events":  "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/events",
		"arn:aws:sqs::000000000000:t-1a2b":               "https://sqs.us-east-1.amazonaws.com/000000000000/t-1a2b", // goaws leaves the region out
		"arn:aws:sqs:us-east-1:123456789012:events.fifo": "https://sqs.us-east-1.amazonaws.com/123456789012/events.fifo",
	} {
		got, err := sqsbatch.QueueURLFromARN(arn)
		require.NoError(t, err, arn)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "events", "arn:aws:sns:us-east-1:123456789012:topic", "arn:aws:sqs:us-east-1::events", "arn:aws:sqs:us-east-1:1:"} {
		_, err := sqsbatch.QueueURLFromARN(bad)
		require.Error(t, err, bad)
	}
}
