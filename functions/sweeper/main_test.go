package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The Lambda's handler writes one EMF line per invocation, before its deadline: the invocation's
// agent settled the three waiting events, pulsed, and left nothing waiting.
func TestOneMetricLinePerInvocation(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "stack-SweeperFunction")
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	_, err := store.Events.CreatePendingBatch(ctx, 3)
	require.NoError(t, err)
	var out bytes.Buffer
	log := wire.NewLogger(io.Discard, 0)
	sc := sweeping.Config{Grace: new(time.Duration(0)), AgentStopBefore: 3 * time.Second, Logger: log,
		Agent: agents.Config{Member: agents.MemberConfig{PulseInterval: 100 * time.Millisecond, Expiration: 2 * time.Second},
			PollInterval: 50 * time.Millisecond}}
	h := handler(store, sc, &out, log)

	// It stops 3 s before the deadline: time to read what waits, on a loaded machine too (1 s was
	// not: "no time left to read the waiting events", and no PendingEvents in the line). It claims
	// for 5 s, as its pulse can wait seconds for a database a parallel suite holds (CI saw a 2 s
	// window of a sweeper's invocation end with no pulse succeeded).
	ictx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	res, err := h(ictx, sweeping.ShardInput{})
	require.NoError(t, err)
	require.Equal(t, 3, res.Processed)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1, "one line per invocation: %s", out.String())
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
	require.Equal(t, "stack-SweeperFunction", line["FunctionName"])
	require.EqualValues(t, 3, line["EventsProcessed"])
	require.EqualValues(t, 3, line["Settled"])
	require.EqualValues(t, 0, line["SweepErrors"])
	require.EqualValues(t, 0, line["PendingEvents"], "nothing waits after the sweep")
	require.EqualValues(t, 0, line["OldestPendingAgeSeconds"])
	require.EqualValues(t, 0, line["PulseFailures"])
	require.GreaterOrEqual(t, line["AgentPulses"], 1.0)
	// One claim took the three events; the polls that found nothing after it are not claims.
	require.Equal(t, []any{3.0}, line["ClaimBatchSize"])
}
