package agentstore_test

import (
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/agentstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The bounded reads of recovery.sql each read one partition: the live workers' for recovery and
// the live listing, the done ones' for the done listing.
func TestRecoveryStatementsReadOnePartition(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	literal := func(q string) string {
		for _, m := range []string{"/*ids*/", "/*live*/"} {
			q = strings.ReplaceAll(q, m, "'1'")
		}
		q = strings.ReplaceAll(q, "created_at > ?", "created_at > '2000-01-01'")
		q = strings.ReplaceAll(q, "done_at < ?", "done_at < '2000-01-01'")
		q = strings.ReplaceAll(q, "created_at = ?", "created_at = '2000-01-01'")
		q = strings.ReplaceAll(q, "done_at = ?", "done_at = '2000-01-01'")
		q = strings.ReplaceAll(q, "is_done = ?", "is_done = 1")
		return strings.ReplaceAll(q, "?", "1")
	}
	for name, want := range map[string]string{"OrphanWorkers": "active", "AdoptedWorker": "active", "LiveWorkerIDs": "active",
		"ActiveWorkerSizes": "active", "DoneWorkerSizes": "done", "WorkersByID": "done"} {
		require.Equal(t, []string{want}, explainPartitions(t, store.DB.Pool(), literal(agentstore.RecoveryQueryText(name))), name)
	}
}
