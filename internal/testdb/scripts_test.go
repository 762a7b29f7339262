package testdb_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/stretchr/testify/require"
)

// `scripts/mariadb.sh ensure` manages the shared server on 127.0.0.1:3306 and nothing else. `make
// run`'s script calls it on every start; a run whose DB_DSN names the tests' own server (13306) or
// another host must not install or start the shared one (in CI, starting it failed after 30 s, and
// the run under test never started). It runs here with a PATH that holds grep alone, so a call
// that tries to manage a server fails at its first command instead of touching this machine's.
func TestEnsureManagesOnlyTheSharedServer(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	grep, err := exec.LookPath("grep")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(grep, filepath.Join(bin, "grep")))
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)

	ensure := func(dsn string) (string, error) {
		cmd := exec.Command(bash, filepath.Join(repo.Root(), "scripts", "mariadb.sh"), "ensure")
		cmd.Env = []string{"PATH=" + bin, "DB_DSN=" + dsn}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	const leftAlone = "DB_DSN points at another server; not managing a local one"
	for _, dsn := range []string{
		"exactlyonce:exactlyonce@tcp(127.0.0.1:13306)/tdb_1",
		"exactlyonce:exactlyonce@tcp(localhost:3307)/",
		"admin:secret@tcp(db.example.com:3306)/exactlyonce",
		"admin:secret@tcp(10.0.0.5)/exactlyonce",
	} {
		out, err := ensure(dsn)
		require.NoError(t, err, "%s: %s", dsn, out)
		require.Contains(t, out, leftAlone, dsn)
	}
	for _, dsn := range []string{
		"exactlyonce:exactlyonce@tcp(127.0.0.1:3306)/exactlyonce",
		"exactlyonce:exactlyonce@tcp(localhost)/exactlyonce",
		"exactlyonce:exactlyonce@/exactlyonce",
	} {
		out, err := ensure(dsn)
		require.Error(t, err, "%s is the shared server's: ensure goes on to manage it (and fails here, without its tools)", dsn)
		require.False(t, strings.Contains(out, leftAlone), "%s: %s", dsn, out)
	}
}
