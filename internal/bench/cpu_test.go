package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/testdb"
)

// The CPU meter's "database" is the server the benchmark talks to, not the first MariaDB found by
// name: with the tests' server and the shared one both running, the name alone often picked the
// idle one, and the progress lines said the database used no CPU. Checked independently of the
// pid file: the process found holds the socket listening on the server's port.
func TestDatabasePIDIsTheServerOfTheConnection(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp: the CPU meter reads nothing here")
	}
	db, _ := testdb.DB(t, 2)
	ctx := context.Background()
	pid := databasePID(ctx, db)
	require.NotZero(t, pid, "no database server found on this machine")
	var port int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT @@port").Scan(&port))
	inodes := listeningInodes(port)
	require.NotEmpty(t, inodes, "no socket listening on port %d in /proc/net/tcp or tcp6", port)
	held, err := holdsSocket(pid, inodes)
	if err != nil {
		t.Skipf("cannot read the server's descriptors (%v): not the server's user or root", err)
	}
	require.True(t, held, "process %d does not hold the socket listening on port %d", pid, port)
	// Without its pid file (unreadable, or another machine's path), the server is still the one
	// holding the socket on its port, not the first MariaDB found by name.
	require.Equal(t, pid, serverPID(filepath.Join(t.TempDir(), "none.pid"), port))
}
