package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// An invocation: its context carries the Recorder, its log lines the request id (those logged
// with a context and those without), and when it returns, failed or not, one EMF line holds what
// it recorded, under FunctionName = AWS_LAMBDA_FUNCTION_NAME.
func TestInvocation(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "stack-ProcessorFunction")
	var out, logs bytes.Buffer
	log := wire.NewLogger(&logs, slog.LevelInfo)
	rec := metrics.NewRecorder(metrics.PartProcessor, true, nil)
	h := wire.Invocation(rec, &out, log, func(ctx context.Context, n int) (int, error) {
		metrics.From(ctx).Add(metrics.EventsProcessed, n)
		log.Info("without a context", "id", 7)
		log.InfoContext(ctx, "with its context")
		if n == 0 {
			return 0, errors.New("nothing")
		}
		return n, nil
	})
	for i, n := range []int{3, 0} {
		out.Reset()
		logs.Reset()
		id := []string{"req-1", "req-2"}[i]
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: id})
		_, err := h(ctx, n)
		require.Equal(t, n == 0, err != nil)
		require.Equal(t, 1, strings.Count(out.String(), "\n"), "one line: %s", out.String())
		var line map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &line))
		require.Equal(t, "stack-ProcessorFunction", line["FunctionName"])
		require.EqualValues(t, n, line["EventsProcessed"])
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		require.Len(t, lines, 2)
		for _, raw := range lines {
			var l map[string]any
			require.NoError(t, json.Unmarshal([]byte(raw), &l))
			require.Equal(t, id, l["requestId"], raw)
		}
	}
	// Between invocations, no request id.
	logs.Reset()
	log.Info("idle")
	require.NotContains(t, logs.String(), "requestId")
}
