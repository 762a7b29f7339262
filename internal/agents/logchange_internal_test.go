package agents

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
)

// A change of state says from what to what; a new shard in the same state says so, with the shard,
// instead of "WAITING from WAITING to WAITING", which a new user read at every start.
func TestAStateChangeSaysWhatChanged(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	m := &Member{log: slog.New(slog.NewTextHandler(&out, nil))}
	total, index := 2, 1
	m.logChange(exactlyonce.Agent{ID: 7, State: exactlyonce.AgentWaiting}, exactlyonce.AgentWaiting, &total, &index, "")
	line := out.String()
	require.Contains(t, line, `msg="agent: WAITING, its shard changed"`)
	require.Contains(t, line, "shard=1 of=2")
	require.NotContains(t, line, "from=")
	out.Reset()
	m.logChange(exactlyonce.Agent{ID: 7, State: exactlyonce.AgentWaiting}, exactlyonce.AgentRunning, &total, &index, "")
	require.Contains(t, out.String(), `msg="agent: RUNNING" agent=7 from=WAITING to=RUNNING`)
}
