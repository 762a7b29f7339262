package local_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// roleLocal starts this test binary as the local runner (cmd/local): local.Run on the environment.
const roleLocal = "local"

func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		if role != roleLocal {
			fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := local.Run(ctx, os.Getenv, os.Stdout)
		stop()
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runnerEnv is the environment of a local runner on endpoint (a local SQS of its own: the runner's
// queues have fixed names), as scripts/run.sh sets it, with ports of its own and no metrics.
func runnerEnv(endpoint string, more ...string) []string {
	return append([]string{child.RoleEnv + "=" + roleLocal, "DB_DSN=", "DB_HOST=", "DB_NAME=", "DB_USER=", "DB_PASSWORD=", "DB_PORT=",
		"AWS_ENDPOINT_URL_SQS=" + endpoint, "AWS_ENDPOINT_URL=", "AWS_ENDPOINT_URL_SNS=", "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "WEBHOOK_SECRET=whsec_ZXhhY3RseW9uY2UtbG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0",
		"WEBHOOK_ALLOW_LOOPBACK=true", "HTTP_ADDR=127.0.0.1:0", "METRICS_ADDR=off", "LOG_LEVEL=info"}, more...)
}

// runToEnd runs the local runner with env until it exits by itself (within a minute), and returns
// its output and exit code.
func runToEnd(t *testing.T, env []string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run the local runner: %v\n%s", err, out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// server is the test database server, and a connection to it without a database.
func server(t *testing.T) (*drv.Config, *sql.DB) {
	t.Helper()
	cfg, err := drv.ParseDSN(testdb.ServerDSN())
	require.NoError(t, err)
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return cfg, db
}

// unusedName returns a database name no test uses, and drops that database when the test ends in
// case something created it.
func unusedName(t *testing.T, db *sql.DB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_run_" + hex.EncodeToString(b)
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS `" + name + "`") })
	return name
}

func databaseExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n))
	return n > 0
}

// dsnOn is the DSN of database name on the test server.
func dsnOn(cfg *drv.Config, name string) string {
	c := cfg.Clone()
	c.DBName = name
	return c.FormatDSN()
}

// endpoint starts a local SQS of the test's own, and returns its URL and a client.
func endpoint(t *testing.T) (string, *sqs.Client) {
	t.Helper()
	srv, err := localsqs.Start("")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv.URL, localsqs.NewClient(srv.URL)
}

func queueCount(t *testing.T, client *sqs.Client) int {
	t.Helper()
	out, err := client.ListQueues(context.Background(), &sqs.ListQueuesInput{})
	require.NoError(t, err)
	return len(out.QueueUrls)
}

// logLines decodes the runner's JSON log lines (the others, such as a panic's, are skipped).
func logLines(out string) []map[string]any {
	var recs []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil {
			recs = append(recs, rec)
		}
	}
	return recs
}

// withMsg returns the first log record whose msg is msg, nil if none.
func withMsg(recs []map[string]any, msg string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

// A port the run needs that is taken is found before the run touches anything: it stops with a
// message naming the variable and the address, having created no database and no queue. It was
// found only once the run had created and migrated its database and created its queues.
func TestRunRefusesATakenPortBeforeTouchingAnything(t *testing.T) {
	t.Parallel()
	cfg, db := server(t)
	for _, variable := range []string{"HTTP_ADDR", "METRICS_ADDR"} {
		t.Run(variable, func(t *testing.T) {
			t.Parallel()
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer taken.Close()
			url, client := endpoint(t)
			name := unusedName(t, db)
			out, code := runToEnd(t, runnerEnv(url, "DB_DSN="+dsnOn(cfg, name), variable+"="+taken.Addr().String()))
			require.Equal(t, 1, code, out)
			require.False(t, databaseExists(t, db, name), "the database was created before the port was checked")
			require.Zero(t, queueCount(t, client), "queues were created before the port was checked")
			failed := withMsg(logLines(out), "startup failed")
			require.NotNil(t, failed, out)
			require.Contains(t, failed["err"], variable+" "+taken.Addr().String()+" is taken", out)
		})
	}
}

// DB_NAME picks the database of `make run`'s server when neither DB_DSN nor DB_HOST is set (it was
// ignored: the default DSN named the database exactlyonce), and the run says at start which database
// (host, port, name, user; never the password) and which queue endpoint it uses. The database is
// created if missing, as one DB_DSN names is. Ctrl-C (SIGINT) stops the run cleanly.
func TestRunHonoursDBName(t *testing.T) {
	t.Parallel()
	cfg, db := server(t)
	host, port, err := net.SplitHostPort(cfg.Addr)
	require.NoError(t, err)
	if host != "127.0.0.1" {
		t.Skipf("the test server (%s) is not make run's 127.0.0.1, where DB_NAME picks a database", cfg.Addr)
	}
	url, _ := endpoint(t)
	name := unusedName(t, db)
	c := child.Start(t, roleLocal, runnerEnv(url, "DB_NAME="+name, "DB_PORT="+port, "DB_USER="+cfg.User, "DB_PASSWORD="+cfg.Passwd)...)
	// Creating and migrating the database is slow on a loaded machine, never wrong: the bound is for
	// a run that hangs.
	require.Eventually(t, func() bool { return withMsg(logLines(strings.Join(c.Output(), "\n")), "local: api listening") != nil },
		5*time.Minute, 20*time.Millisecond, "the run never listened: %q", c.Output())
	recs := logLines(strings.Join(c.Output(), "\n"))
	start := withMsg(recs, "local: starting")
	require.NotNil(t, start, c.Output())
	require.Equal(t, map[string]any{"host": "127.0.0.1", "port": port, "name": name, "user": cfg.User}, start["database"], c.Output())
	require.Equal(t, url, start["sqs"], c.Output())
	for _, l := range c.Output() {
		require.NotContains(t, strings.ToLower(l), "password", "a log line names the password")
		require.NotContains(t, l, cfg.User+":"+cfg.Passwd+"@", "a log line holds the DSN")
	}
	require.True(t, databaseExists(t, db, name), "DB_NAME's database was not created")
	var tables int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'events'", name).Scan(&tables))
	require.Equal(t, 1, tables, "DB_NAME's database was not migrated")

	require.NoError(t, syscall.Kill(c.Pid(), syscall.SIGINT))
	select {
	case <-c.Exited():
	case <-time.After(60 * time.Second):
		t.Fatalf("the run did not stop on SIGINT: %q", c.Output())
	}
	require.NotNil(t, withMsg(logLines(strings.Join(c.Output(), "\n")), "local: stopped"), c.Output())
}

// DB_NAME (or DB_HOST, DB_PORT, DB_USER, DB_PASSWORD) beside DB_DSN is refused, not ignored: the run
// stops at once saying which variables disagree, having created neither database and no queue.
func TestRunRefusesDBNameBesideDBDSN(t *testing.T) {
	t.Parallel()
	cfg, db := server(t)
	url, client := endpoint(t)
	named, other := unusedName(t, db), unusedName(t, db)
	out, code := runToEnd(t, runnerEnv(url, "DB_DSN="+dsnOn(cfg, named), "DB_NAME="+other))
	require.Equal(t, 1, code, out)
	failed := withMsg(logLines(out), "startup failed")
	require.NotNil(t, failed, out)
	require.Contains(t, failed["err"], "DB_NAME", out)
	require.Contains(t, failed["err"], "DB_DSN", out)
	require.False(t, databaseExists(t, db, named))
	require.False(t, databaseExists(t, db, other))
	require.Zero(t, queueCount(t, client))
}
