package sweeping_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The sweeper's maintenance backfills the reference directory of a database migrated with tasks in
// it (migration 0016), so that the listings read the directory once it is complete.
func TestMaintenanceBackfillsTheReferenceDirectory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()
	var want []int64
	for i := range 3 {
		created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: "https://example.com/hook",
			Payload: json.RawMessage(`{}`), ReferenceID: "old", MaxRetries: 3}})
		require.NoError(t, err)
		want = append(want, created[0].ID)
		_, err = store.Events.CreatePendingBatch(ctx, 50*(i+1))
		require.NoError(t, err)
	}
	require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))

	_, err := sweeping.New(store.Sweeping(), sweeping.Config{KeepHistory: true, Logger: quietLogger()}).Maintain(ctx)
	require.NoError(t, err)
	var done int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reference_backfill WHERE next_id >= until_id").Scan(&done))
	require.Equal(t, 1, done, "the backfill is complete")
	// A process started now reads the directory, which holds the reference's tasks.
	got, err := wire.NewStores(store.DB).Tasks.ReferenceTasks(ctx, "old", 0, 10)
	require.NoError(t, err)
	ids := make([]int64, len(got))
	for i, e := range got {
		ids[i] = e.ID
	}
	require.Equal(t, want, ids)
}

// The sweeper's maintenance moves what creates logged into the directory's cells (migration 0018),
// so that the log a listing reads besides its cell holds only what came since the last one.
func TestMaintenanceCompactsTheDirectoryLog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()
	var want []int64
	for i := range 4 {
		created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: "https://example.com/hook",
			Payload: json.RawMessage(`{}`), ReferenceID: fmt.Sprintf("ref-%d", i%2), MaxRetries: 3}})
		require.NoError(t, err)
		want = append(want, created[0].ID)
	}
	logged := func() int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reference_directory_log").Scan(&n))
		return n
	}
	require.Equal(t, 4, logged())

	_, err := sweeping.New(store.Sweeping(), sweeping.Config{KeepHistory: true, Logger: quietLogger()}).Maintain(ctx)
	require.NoError(t, err)
	require.Zero(t, logged(), "the maintenance moved the log into the cells")
	got, err := store.Tasks.ReferenceTasks(ctx, "ref-0", 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []int64{want[0], want[2]}, []int64{got[0].ID, got[1].ID})
}
