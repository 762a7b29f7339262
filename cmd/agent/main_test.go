package main

import (
	"context"
	"database/sql"
	"net"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// `make agent` (bin/agent -local) joins the database `make run` uses: DB_NAME=newcomer make run
// and then DB_NAME=newcomer make agent are one system. Before -local, `make agent` set DB_DSN to
// make run's default database, so beside DB_NAME it stopped at start ("DB_NAME would be ignored"),
// and without it it registered in the database exactlyonce while the run used another, silently.
// Without -local, DB_NAME alone is refused as before: a deployed agent names its database fully.
func TestLocalJoinsTheDatabaseMakeRunNames(t *testing.T) {
	t.Parallel()
	dsn, env := makeRunDatabase(t)
	env["AGENT_NAME"], env["LOG_LEVEL"] = "make-agent", "info"
	lookup := lookupIn(env)

	plain, err := environment(nil, lookup)
	require.NoError(t, err)
	out := &testutil.Buffer{}
	require.ErrorContains(t, run(context.Background(), plain, nil, out), "set DB_DSN, or DB_HOST and DB_USER", out.String())

	local, err := environment([]string{"-local"}, lookup)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out = &testutil.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, local, nil, out) }()

	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer db.Close()
	testutil.Eventually(t, 2*time.Minute, "the agent registered in DB_NAME's database", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped before it registered (%v):\n%s", err, out.String())
		default:
		}
		var n int
		return db.QueryRow("SELECT COUNT(*) FROM agents WHERE name = 'make-agent'").Scan(&n) == nil && n == 1
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, out.String())
	case <-time.After(time.Minute):
		t.Fatalf("the agent did not stop:\n%s", out.String())
	}
}

// The agent reads the process's environment as every entrypoint does (config.LoadEnvironOf): a
// typo in a variable of its own (AGENT_BATCHSIZE) stops it at start, naming the variable, before
// it touches the database; before, it was ignored and the agent claimed 50 events a batch.
func TestAnUnknownVariableStopsTheAgentAtStart(t *testing.T) {
	t.Parallel()
	environ := []string{"DB_DSN=u:p@tcp(127.0.0.1:1)/nowhere", "AGENT_BATCHSIZE=5"}
	getenv := func(k string) string {
		return map[string]string{"DB_DSN": "u:p@tcp(127.0.0.1:1)/nowhere", "AGENT_BATCHSIZE": "5"}[k]
	}
	out := &testutil.Buffer{}
	err := run(context.Background(), getenv, environ, out)
	require.ErrorContains(t, err, "AGENT_BATCHSIZE is not a variable of this system")
	require.Contains(t, out.String(), `"msg":"startup failed"`)
	require.Contains(t, out.String(), "AGENT_BATCH_SIZE")
}

// `make agent` with WEBHOOK_ALLOW_LOOPBACK set to nothing stops at start, naming it, as every
// true/false set to nothing does (docs/configuration.md); before, -local read it as unset and put in
// true, so that WEBHOOK_ALLOW_LOOPBACK= allowed deliveries to loopback. Unset, -local still allows
// them, and false set is false.
func TestLocalRefusesAnEmptyAllowLoopback(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{"": "WEBHOOK_ALLOW_LOOPBACK is set but empty", " ": "WEBHOOK_ALLOW_LOOPBACK is set but empty",
		"yes": `WEBHOOK_ALLOW_LOOPBACK must be true or false, got "yes"`} {
		env := map[string]string{"DB_DSN": "u:p@tcp(127.0.0.1:1)/nowhere", "WEBHOOK_ALLOW_LOOPBACK": value}
		local, err := environment([]string{"-local"}, lookupIn(env))
		require.NoError(t, err)
		out := &testutil.Buffer{}
		err = run(context.Background(), local, environOf(env), out)
		require.ErrorContains(t, err, want, "WEBHOOK_ALLOW_LOOPBACK=%q", value)
		require.Contains(t, out.String(), `"msg":"startup failed"`)
	}
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{{map[string]string{}, true}, {map[string]string{"WEBHOOK_ALLOW_LOOPBACK": "false"}, false},
		{map[string]string{"WEBHOOK_ALLOW_LOOPBACK": "true"}, true}} {
		env, want := tc.env, tc.want
		env["DB_DSN"] = "u:p@tcp(127.0.0.1:1)/nowhere"
		local, err := environment([]string{"-local"}, lookupIn(env))
		require.NoError(t, err)
		cfg, err := config.LoadEnvironOf(local, environOf(env))
		require.NoError(t, err, env)
		require.Equal(t, want, cfg.Webhook.AllowLoopback, env)
	}
}

// lookupIn is os.LookupEnv of an environment held in env.
func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// environOf is os.Environ of an environment held in env.
func environOf(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// makeRunDatabase is a new database on the tests' server, as its DSN and as the DB_ variables that
// name it the way `make run` and `make agent` read them (DB_NAME on 127.0.0.1). It skips the test
// when the server is elsewhere, where DB_NAME picks no database.
func makeRunDatabase(t *testing.T) (dsn string, env map[string]string) {
	t.Helper()
	dsn = testdb.NewDatabase(t)
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(cfg.Addr)
	require.NoError(t, err)
	if host != "127.0.0.1" {
		t.Skipf("the test server (%s) is not make run's 127.0.0.1, where DB_NAME picks a database", cfg.Addr)
	}
	return dsn, map[string]string{"DB_NAME": cfg.DBName, "DB_PORT": port, "DB_USER": cfg.User, "DB_PASSWORD": cfg.Passwd}
}
