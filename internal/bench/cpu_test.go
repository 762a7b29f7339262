package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	inode := listeningInode(t, port)
	require.NotEmpty(t, inode, "no socket listening on port %d in /proc/net/tcp", port)
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Skipf("cannot read the server's descriptors (%v): not the server's user or root", err)
	}
	held := false
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); err == nil && l == "socket:["+inode+"]" {
			held = true
			break
		}
	}
	require.True(t, held, "process %d does not hold the socket listening on port %d", pid, port)
	// Without its pid file (unreadable, or another machine's path), the server is still the one
	// holding the socket on its port, not the first MariaDB found by name.
	require.Equal(t, pid, serverPID(filepath.Join(t.TempDir(), "none.pid"), port))
}

// listeningInode returns the inode of a socket listening on port, from /proc/net/tcp or tcp6.
func listeningInode(t *testing.T, port int) string {
	want := fmt.Sprintf(":%04X", port)
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return f[9]
			}
		}
	}
	return ""
}
