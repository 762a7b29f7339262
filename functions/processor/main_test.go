package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The Lambda's handler writes one EMF line per invocation, after its work: three events processed
// in one claim of four ids, one of which names no event.
func TestOneMetricLinePerInvocation(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "stack-ProcessorFunction")
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	ids, err := store.Events.CreatePendingBatch(ctx, 3)
	require.NoError(t, err)
	var out bytes.Buffer
	log := wire.NewLogger(io.Discard, 0)
	h := handler(&processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks, Logger: log}}, &out, log)

	var ev events.SQSEvent
	missing := int64(1 << 50) // above the id counter: no event has it
	for i, id := range append(ids, missing) {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: "m" + strconv.Itoa(i), Body: queue.Encode(id)})
	}
	resp, err := h(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "m3"}}, resp.BatchItemFailures, "the missing id's message comes back")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1, "one line per invocation: %s", out.String())
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
	require.Equal(t, "stack-ProcessorFunction", line["FunctionName"])
	require.EqualValues(t, 3, line["EventsProcessed"])
	require.Equal(t, []any{3.0}, line["ClaimBatchSize"], "one claim, of the three stored events")
	require.EqualValues(t, 1, line["OutcomeMissing"])
	require.EqualValues(t, 0, line["OutcomeBusy"])
	require.NotEmpty(t, line["TransactionDuration"])

	// The next invocation: the same messages again; everything is settled already.
	out.Reset()
	_, err = h(ctx, ev)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out.Bytes(), &line))
	require.EqualValues(t, 0, line["EventsProcessed"], "a line holds its own invocation only")
}
