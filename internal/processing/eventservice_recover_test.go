package processing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A pulse's recovery reads only what it needs: with 400 live workers of a live agent and 150 of a
// dead one, the first pulse adopts 100 of the dead agent's (recoverBatch) and the second the other
// 50, and the rows their statements return are the orphans' alone (an id and an agent each, then
// the adopted ones' references), not every live worker's references; a third pulse, with nothing
// to adopt, reads no worker's row. Before, each pulse read all 550 live workers' references
// (ActiveWorkers), the live agent's too.
func TestARecoveryPulseReadsOnlyTheOrphans(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, dsn := testdb.DB(t, 4)
	db, tally := mysqltest.TalliedDB(t, dsn, 4, "FROM event_workers")
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	me, err := store.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "me", Kind: "test", Sharding: exactlyonce.ShardingDynamic}, time.Hour)
	require.NoError(t, err)
	other, err := store.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "other", Kind: "test", Sharding: exactlyonce.ShardingDynamic}, time.Hour)
	require.NoError(t, err)
	const dead = 999_999_999
	const held, orphaned = 400, 150
	newWorkers := func(agent int64, n int, prefix string) {
		var ws []exactlyonce.EventWorker
		for i := range n {
			w := exactlyonce.EventWorker{ID: fmt.Sprintf("w_%s%04d", prefix, i), AgentID: agent, MaxReferenceCount: 20}
			for j := range 20 {
				w.References = append(w.References, fmt.Sprintf("%s%04d-%02d-", prefix, i, j)+strings.Repeat("r", 40))
			}
			ws = append(ws, w)
		}
		for lo := 0; lo < n; lo += 50 {
			require.NoError(t, store.Agents.AssignWorkers(ctx, exactlyonce.NewClaimID(), agent,
				exactlyonce.WorkerAssignment{New: ws[lo:min(n, lo+50)]}))
		}
	}
	newWorkers(other.ID, held, "h")
	newWorkers(dead, orphaned, "o")

	svc := &processing.EventService{Store: store.Agents, AgentID: func() int64 { return me.ID }}
	pulse := func() ([]string, int64) {
		before := tally.Rows()
		got, err := svc.Recover(ctx, exactlyonce.AllHashes)
		require.NoError(t, err)
		return got, tally.Rows() - before
	}
	first, rows := pulse()
	require.LessOrEqual(t, rows, int64(2*100), "the orphans' rows only: an id and agent, then the adopted one's references")
	require.Len(t, first, 100, "a pulse adopts a batch")
	second, rows := pulse()
	require.Len(t, second, orphaned-100, "the next pulse adopts the rest")
	require.LessOrEqual(t, rows, int64(2*len(second)))
	third, rows := pulse()
	require.Empty(t, third)
	require.Zero(t, rows, "nothing to adopt: no worker's row read")

	adopted := append(first, second...)
	for i := range orphaned {
		require.Contains(t, adopted, fmt.Sprintf("w_o%04d", i))
	}
	require.ElementsMatch(t, adopted, svc.Workers())
	ws, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	for _, w := range ws {
		if strings.HasPrefix(w.ID, "w_o") {
			require.Equal(t, me.ID, w.AgentID, w.ID)
		} else {
			require.Equal(t, other.ID, w.AgentID, "a live agent's worker stays its own: %s", w.ID)
		}
	}
}
