package local

import (
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// envOf reads the configuration from m, with a database set, as config.Load requires one.
func envOf(m map[string]string) func(string) string {
	return func(k string) string {
		if k == "DB_DSN" {
			return "u:p@tcp(h:3306)/d"
		}
		return m[k]
	}
}

// load is config.Load's reading of m, as Options.
func load(t *testing.T, m map[string]string) (Options, error) {
	t.Helper()
	c, err := config.Load(envOf(m))
	return Env(c), err
}

func TestEnvAsyncLinger(t *testing.T) {
	t.Parallel()
	o, err := load(t, nil)
	require.NoError(t, err)
	require.Nil(t, o.AsyncLinger, "unset")
	require.Equal(t, wire.DefaultAsyncLinger, wire.AsyncLinger(o.AsyncLinger), "unset: Start applies the default")

	o, err = load(t, map[string]string{"ASYNC_LINGER": "20ms"})
	require.NoError(t, err)
	require.Equal(t, new(20*time.Millisecond), o.AsyncLinger)

	o, err = load(t, map[string]string{"ASYNC_LINGER": "0"})
	require.NoError(t, err)
	require.Equal(t, new(time.Duration(0)), o.AsyncLinger, "0 turns the linger off: answer after the send")
	require.Zero(t, wire.AsyncLinger(o.AsyncLinger), "passed on as zero, which api.AsyncGroup.Linger reads as none")

	for _, bad := range []string{"-1s", "5", "soon"} {
		_, err = load(t, map[string]string{"ASYNC_LINGER": bad})
		require.ErrorContains(t, err, "ASYNC_LINGER must be", "ASYNC_LINGER=%s", bad)
	}
}

// Every local variable reaches Options; unset ones stay zero, for Start and the components to
// default.
func TestEnv(t *testing.T) {
	t.Parallel()
	o, err := load(t, nil)
	require.NoError(t, err)
	require.Equal(t, Options{}, o)

	o, err = load(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "MAPPING_CONCURRENCY": "8", "MAPPING_BATCH_SIZE": "5",
		"PROCESSOR_TIMEOUT": "10s", "SWEEP_INTERVAL": "1s", "SWEEP_BATCH_SIZE": "50", "SWEEP_GRACE": "0",
		"VISIBILITY_HEARTBEAT": "1s", "VISIBILITY_EXTENSION": "4s"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", o.HTTPAddr)
	require.Equal(t, new(8), o.MappingConcurrency)
	require.Equal(t, 5, o.MappingBatchSize)
	require.Equal(t, 10*time.Second, o.ProcessorTimeout)
	require.Equal(t, time.Second, o.SweepInterval)
	require.Equal(t, 50, o.Sweep.BatchSize)
	require.Equal(t, new(time.Duration(0)), o.Sweep.Grace, "SWEEP_GRACE=0: no grace, spelled as config spells it")
	require.Equal(t, time.Second, o.VisibilityHeartbeat)
	require.Equal(t, 4*time.Second, o.VisibilityExtension)

	o, err = load(t, map[string]string{"MAPPING_CONCURRENCY": "0", "AGENT_PULSE_INTERVAL": "1s", "AGENT_EXPIRATION": "9s",
		"SHARDS_TOTAL": "2", "SHARDS_ASSIGNED": "1"})
	require.NoError(t, err)
	require.Equal(t, new(0), o.MappingConcurrency, "MAPPING_CONCURRENCY=0: no queue consumer")
	require.Equal(t, time.Second, o.Agent.Member.PulseInterval)
	require.Equal(t, 9*time.Second, o.Agent.Member.Expiration)
	require.Equal(t, &agents.Shard{Total: 2, Index: 1}, o.Agent.Member.Static)
}

// Without DB_DSN and DB_HOST, the local runner's DB_DSN is make run's database with DB_NAME,
// DB_USER, DB_PASSWORD and DB_PORT put in, so that config.Load takes them (it refuses them beside a
// DB_DSN); beside DB_DSN or DB_HOST they are read as they are.
func TestGetenvFoldsTheDatabaseVariables(t *testing.T) {
	t.Parallel()
	read := func(m map[string]string) (config.Config, error) {
		return config.Load(Getenv(func(k string) string { return m[k] }))
	}
	c, err := read(nil)
	require.NoError(t, err)
	require.Equal(t, config.DB{DSN: config.LocalDSN}, c.DB)

	c, err = read(map[string]string{"DB_NAME": "newcomer", "DB_USER": "me", "DB_PASSWORD": "secret", "DB_PORT": "3307"})
	require.NoError(t, err)
	require.Equal(t, config.DB{DSN: "me:secret@tcp(127.0.0.1:3307)/newcomer"}, c.DB)

	_, err = read(map[string]string{"DB_PORT": "x"})
	require.ErrorContains(t, err, "DB_PORT must be an integer")

	_, err = read(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d", "DB_NAME": "newcomer"})
	require.ErrorContains(t, err, "so DB_NAME would be ignored")

	c, err = read(map[string]string{"DB_HOST": "h", "DB_USER": "u", "DB_NAME": "n"})
	require.NoError(t, err)
	require.Equal(t, config.DB{Host: "h", User: "u", Name: "n"}, c.DB)
}

// The API's check of a task's url follows the deliverers' settings.
func TestEnvWebhookPolicy(t *testing.T) {
	t.Parallel()
	o, err := load(t, map[string]string{"WEBHOOK_ALLOW_LOOPBACK": "true"})
	require.NoError(t, err)
	require.Equal(t, webhook.Policy{AllowLoopback: true}, o.Webhook)
	o, err = load(t, map[string]string{"WEBHOOK_ALLOW_PRIVATE": "true"})
	require.NoError(t, err)
	require.Equal(t, webhook.Policy{AllowPrivate: true}, o.Webhook)
}
