package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// `make agent` beside `make run` delivers tasks as the run does: signed with the run's development
// secret, to receivers on loopback. Before, `make agent` set neither WEBHOOK_SECRET nor
// WEBHOOK_ALLOW_LOOPBACK: each standalone agent said "this process delivers no task" and yet took
// its share of the hash ranges, so the tasks of every reference in its range waited, undelivered,
// for as long as it ran (found driving ordered tasks while agents joined a `make run`).
func TestLocalDeliversTasksAsMakeRunDoes(t *testing.T) {
	t.Parallel()
	dsn, env := makeRunDatabase(t)

	// A receiver on loopback that takes only what is signed with make run's secret.
	wh, err := standardwebhooks.NewWebhook(config.LocalWebhookSecret)
	require.NoError(t, err)
	var mu sync.Mutex
	var taken []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		taken = append(taken, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	full, err := config.Load(func(k string) string { return map[string]string{"DB_DSN": dsn}[k] })
	require.NoError(t, err)
	stores, err := wire.OpenStores(ctx, full)
	require.NoError(t, err)
	defer stores.DB.Pool().Close()
	created, err := stores.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: []byte(`{"n":1}`), ReferenceID: "make-agent", MaxRetries: 0}})
	require.NoError(t, err)

	// Only what `DB_NAME=x make agent` has: no WEBHOOK_SECRET, no WEBHOOK_ALLOW_LOOPBACK.
	for k, v := range map[string]string{"AGENT_NAME": "make-agent", "SWEEP_GRACE": "0", "AGENT_POLL_INTERVAL": "100ms",
		"AGENT_PULSE_INTERVAL": "200ms"} {
		env[k] = v
	}
	local, err := environment([]string{"-local"}, lookupIn(env))
	require.NoError(t, err)
	out := &testutil.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, local, nil, out) }()
	testutil.Eventually(t, time.Minute, "the agent delivered the task, signed with make run's secret", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped (%v):\n%s", err, out.String())
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return len(taken) == 1
	})
	mu.Lock()
	require.Equal(t, []string{"task_" + strconv.FormatInt(created[0].ID, 10)}, taken)
	mu.Unlock()
	require.NotContains(t, out.String(), "delivers no task")
	require.NotContains(t, out.String(), config.LocalWebhookSecret, "the secret is never logged")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, out.String())
	case <-time.After(time.Minute):
		t.Fatalf("the agent did not stop:\n%s", out.String())
	}

	// Without -local (a deployed agent), nothing is put in: no secret, no loopback.
	plain, err := environment(nil, lookupIn(env))
	require.NoError(t, err)
	require.Empty(t, plain("WEBHOOK_SECRET"))
	require.Empty(t, plain("WEBHOOK_ALLOW_LOOPBACK"))
	// With -local, what is set wins.
	env["WEBHOOK_ALLOW_LOOPBACK"] = "false"
	env["WEBHOOK_SECRET_ARN"] = "arn:aws:secretsmanager:us-east-1:1:secret:x"
	local, err = environment([]string{"-local"}, lookupIn(env))
	require.NoError(t, err)
	require.Equal(t, "false", local("WEBHOOK_ALLOW_LOOPBACK"))
	require.Empty(t, local("WEBHOOK_SECRET"), "a secret ARN set: no development secret beside it")
}
