package sqsbatch_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/stretchr/testify/require"
)

func batch(bodies ...string) events.SQSEvent {
	var ev events.SQSEvent
	for i, b := range bodies {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: "m" + strconv.Itoa(i), Body: b})
	}
	return ev
}

func failures(resp events.SQSEventResponse) []string {
	var out []string
	for _, f := range resp.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	return out
}

// A handler of integers that fails the messages whose number is odd: a second user of the batch
// bookkeeping, with its own decoder and its own work, as the counter service will be.
func odds(calls *int) *sqsbatch.Handler[int] {
	return &sqsbatch.Handler[int]{
		Name:   "test",
		Decode: strconv.Atoi,
		Work: func(_ context.Context, msgs []sqsbatch.Message[int]) ([]string, error) {
			*calls++
			var failed []string
			for _, m := range msgs {
				if m.Body%2 == 1 {
					failed = append(failed, m.ID, m.ID) // named twice: reported once
				}
			}
			return failed, nil
		},
	}
}

func TestBatchReportsMalformedAndFailedMessagesOnce(t *testing.T) {
	t.Parallel()
	calls := 0
	resp, err := odds(&calls).Handle(context.Background(), batch("2", "x", "3", "4", "", "5"))
	require.NoError(t, err)
	require.Equal(t, []string{"m1", "m4", "m2", "m5"}, failures(resp))
	require.Equal(t, 1, calls, "the work sees the decoded messages in one call")
}

func TestBatchOfOnlyMalformedMessagesCallsNoWork(t *testing.T) {
	t.Parallel()
	calls := 0
	resp, err := odds(&calls).Handle(context.Background(), batch("a", "b"))
	require.NoError(t, err)
	require.Equal(t, []string{"m0", "m1"}, failures(resp))
	require.Zero(t, calls)
}

func TestBatchWorkErrorFailsEveryDecodedMessageButNeverTheHandler(t *testing.T) {
	t.Parallel()
	h := &sqsbatch.Handler[int]{Decode: strconv.Atoi,
		Work: func(context.Context, []sqsbatch.Message[int]) ([]string, error) { return nil, errors.New("tx failed") }}
	resp, err := h.Handle(context.Background(), batch("1", "x", "2"))
	require.NoError(t, err, "an error from the handler would fail the whole batch, malformed messages included")
	require.ElementsMatch(t, []string{"m0", "m1", "m2"}, failures(resp))
}

// The mapping fails the whole batch for an item identifier that names no message: never report one.
func TestBatchNeverReportsAnIdentifierOutsideTheBatch(t *testing.T) {
	t.Parallel()
	h := &sqsbatch.Handler[int]{Decode: strconv.Atoi,
		Work: func(context.Context, []sqsbatch.Message[int]) ([]string, error) {
			return []string{"", "other", "m1"}, nil
		}}
	resp, err := h.Handle(context.Background(), batch("1", "2"))
	require.NoError(t, err)
	require.Equal(t, []string{"m1"}, failures(resp))
}

func TestEmptyBatchSucceeds(t *testing.T) {
	t.Parallel()
	calls := 0
	resp, err := odds(&calls).Handle(context.Background(), events.SQSEvent{})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Zero(t, calls)
}
