package e2e

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
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The check the tests make (checkSettled, requireSettledOnce) must be able to fail. Events are
// settled a second time behind the system's back: reset to pending by hand, as if the guard had
// let a second worker in, and settled again. The table then looks as right as ever (settled once,
// process_count 1, a value); only the workers' reports show the second settlement.
func TestTheCheckCatchesAnEventSettledTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	ledger := verify.NewLedger()
	ids := make([]int64, 3)
	for i := range ids {
		id, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
		ids[i] = id
	}
	out, err := (&processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.ByProcessor, Report: ledger, Logger: testLogger()}).
		ProcessIDs(ctx, ids)
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, exactlyonce.OutcomeSettled, out[id])
	}
	requireSettledOnce(t, store, ledger, ids, exactlyonce.ByProcessor) // so far, so good

	reset := func(id int64) {
		_, err := store.DB.Pool().ExecContext(ctx, `UPDATE events SET state = 0, value = NULL, processed_at = NULL,
  processed_by = NULL, process_count = 0, claim_id = NULL, lease_expires_at = NULL WHERE id = ?`, id)
		require.NoError(t, err)
	}
	// ids[1] is settled again by a worker that reports it: two reports of one event.
	twice := ids[1]
	reset(twice)
	res, err := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Logger: testLogger(), Engine: processing.Engine{Report: ledger}}).Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Processed)
	// ids[2] is settled again by a worker that does not report: the first worker's report names a
	// claim the table does not.
	silent := ids[2]
	reset(silent)
	out, err = (&processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: testLogger()}).ProcessIDs(ctx, []int64{silent})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeSettled, out[silent])

	// What the table alone says, as the old check read it: every event settled once.
	for _, id := range ids {
		var state exactlyonce.State
		var count int
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT state, process_count FROM events WHERE id = ?", id).Scan(&state, &count))
		require.True(t, state.Settled())
		require.Equal(t, 1, count, "process_count cannot tell event %d was settled twice", id)
	}

	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	chk := verify.Check(audit, ledger)
	require.False(t, chk.OK(), "requireSettledOnce would fail the test: %s", chk)
	claimOf := map[int64]string{}
	for _, e := range audit {
		claimOf[e.ID] = e.ClaimID
	}
	require.Len(t, chk.Violations, 2, "%q", chk.Violations)
	joined := strings.Join(chk.Violations, "\n")
	require.Contains(t, joined, fmt.Sprintf("event %d was settled more than once: claims [", twice))
	require.Contains(t, joined, fmt.Sprintf("event %d was reported settled by claim", silent))
	require.Contains(t, joined, fmt.Sprintf("but the table says claim %q settled it", claimOf[silent]))
	require.Equal(t, 1, chk.Reported, "only ids[0] is settled and reported once: %s", chk)
}
