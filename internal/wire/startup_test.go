package wire_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// mustChildEnv makes this test binary, started again by TestMustLogsOneJSONLine, fail at start-up.
const mustChildEnv = "WIRE_TEST_MUST_FAIL"

func TestMain(m *testing.M) {
	if msg := os.Getenv(mustChildEnv); msg != "" {
		wire.Must(0, errors.New(msg))
		os.Exit(0) // not reached
	}
	os.Exit(m.Run())
}

// A start-up error is one JSON line on stdout, where every other log line goes, at level ERROR,
// and the process exits non-zero.
func TestMustLogsOneJSONLine(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mustChildEnv+`=configuration: DB_PORT must be an integer from 1 to 65535, got "x"`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the process fails")
	require.NotZero(t, exit.ExitCode())
	require.Empty(t, stderr.String(), "nothing in plain text")

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 1, "one line: %q", stdout.String())
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec), "a JSON object: %q", lines[0])
	require.Equal(t, "ERROR", rec["level"])
	require.Equal(t, "startup failed", rec["msg"])
	require.Equal(t, `configuration: DB_PORT must be an integer from 1 to 65535, got "x"`, rec["err"])
	require.NotEmpty(t, rec["time"])
}

// missingDatabase returns a DSN of the test server naming a database that does not exist, and drops
// it when the test ends in case the test created it.
func missingDatabase(t *testing.T, dsn string) (string, string) {
	t.Helper()
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	cfg.DBName = "t_missing_" + hex.EncodeToString(b)
	t.Cleanup(func() { admin(t).Exec("DROP DATABASE IF EXISTS " + cfg.DBName) })
	return cfg.FormatDSN(), cfg.DBName
}

// admin is a connection to the test server as its administrative user, with no database.
func admin(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := drv.ParseDSN(testdb.ServerDSN())
	require.NoError(t, err)
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, admin(t).QueryRow(
		"SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n))
	return n == 1
}

// A DB_DSN naming a database the server does not have fails start-up with an error that names the
// database and says what to do, not only the driver's "Error 1049".
func TestOpenStoreNamesTheMissingDatabase(t *testing.T) {
	t.Parallel()
	dsn, name := missingDatabase(t, testdb.ServerDSN())
	_, err := wire.OpenStores(context.Background(), load(t, map[string]string{"DB_DSN": dsn}))
	require.Error(t, err)
	require.ErrorContains(t, err, `database "`+name+`" does not exist`)
	require.ErrorContains(t, err, "CREATE DATABASE")
	require.ErrorContains(t, err, "DB_DSN")
	var me *drv.MySQLError
	require.ErrorAs(t, err, &me, "the driver's error is kept")
	require.EqualValues(t, 1049, me.Number)
	require.False(t, databaseExists(t, name), "OpenStore creates nothing")
}

// The local runner creates the database DB_DSN names if the user may, and says so.
func TestOpenLocalStoreCreatesTheDatabase(t *testing.T) {
	t.Parallel()
	dsn, name := missingDatabase(t, testdb.ServerDSN())
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	store, err := wire.OpenLocalStores(context.Background(), load(t, map[string]string{"DB_DSN": dsn}), log)
	require.NoError(t, err)
	t.Cleanup(func() { store.DB.Pool().Close() })
	require.True(t, databaseExists(t, name))
	var tables int
	require.NoError(t, store.DB.Pool().QueryRow(
		"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables))
	require.Positive(t, tables, "and migrated it")

	var rec map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rec), out.String())
	require.Equal(t, "INFO", rec["level"])
	require.Equal(t, "local: created the database, which did not exist", rec["msg"])
	require.Equal(t, name, rec["database"])

	// A second start finds it, and says nothing.
	out.Reset()
	again, err := wire.OpenLocalStores(context.Background(), load(t, map[string]string{"DB_DSN": dsn}), log)
	require.NoError(t, err)
	again.DB.Pool().Close()
	require.Empty(t, out.String())
}

// A user who may not create the database gets an error naming it and what to do, and nothing is
// created; a user with no privilege on it at all (the server answers 1044, not 1049, whether it
// exists or not) is told that too. Privileges are checked on a private server, where the test may
// grant (the shared server's user may not).
func TestOpenLocalStoreCannotCreateTheDatabase(t *testing.T) {
	t.Parallel()
	srv := fault.PrivateServer(t)
	ctx := context.Background()
	conn := srv.CheckPrivileges(t,
		"CREATE USER 'reader'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT ON *.* TO 'reader'@'%'", // sees every database, may create none
		"CREATE USER 'nobody'@'%' IDENTIFIED BY 'pw'")
	dsn := func(user string) string {
		cfg := drv.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, "pw", "tcp", srv.Addr(), "nosuch"
		return cfg.FormatDSN()
	}
	exists := func() bool {
		var n int
		require.NoError(t, conn.QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'nosuch'").Scan(&n))
		return n == 1
	}
	quiet := slog.New(slog.DiscardHandler)

	_, err := wire.OpenLocalStores(ctx, load(t, map[string]string{"DB_DSN": dsn("reader")}), quiet)
	require.Error(t, err)
	require.ErrorContains(t, err, `database "nosuch" does not exist`)
	require.ErrorContains(t, err, `user "reader" may not create it`)
	require.ErrorContains(t, err, "CREATE DATABASE `nosuch`")
	require.ErrorContains(t, err, "DB_DSN")
	require.False(t, exists())

	_, err = wire.OpenLocalStores(ctx, load(t, map[string]string{"DB_DSN": dsn("nobody")}), quiet)
	require.Error(t, err)
	require.ErrorContains(t, err, `user "nobody" may not use database "nosuch", or it does not exist`)
	require.ErrorContains(t, err, "GRANT ALL ON `nosuch`.*")
	require.ErrorContains(t, err, "DB_DSN")
	var me *drv.MySQLError
	require.ErrorAs(t, err, &me)
	require.EqualValues(t, 1044, me.Number)
	require.False(t, exists())
}
