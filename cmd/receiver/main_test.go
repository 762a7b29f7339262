package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/stretchr/testify/require"
)

// The example receiver takes what the project's deliverer signs, once per webhook-id, and refuses
// what it did not sign.
func TestReceiverVerifiesAndDeduplicates(t *testing.T) {
	srv, out, client := serve(t, 1)
	req := webhook.Request{ID: "task_7", URL: srv.URL, Payload: []byte(`{"order":7}`)}

	require.Equal(t, http.StatusServiceUnavailable, client.Deliver(t.Context(), req).Status, "-fail 1: the first attempt")
	require.Equal(t, webhook.Delivered, client.Deliver(t.Context(), req).Outcome)
	require.Equal(t, webhook.Delivered, client.Deliver(t.Context(), req).Outcome, "a duplicate is answered too")
	require.Equal(t, "task_7 {\"order\":7}\n", out.String(), "and taken once")

	other, err := webhook.ParseSecret("whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldC1vdGhlci1zZWNyZXQ=")
	require.NoError(t, err)
	forged := webhook.New(webhook.Config{Key: other, AllowLoopback: true, Timeout: 5 * time.Second})
	res := forged.Deliver(t.Context(), webhook.Request{ID: "task_8", URL: srv.URL, Payload: []byte(`{}`)})
	require.Equal(t, http.StatusUnauthorized, res.Status)
	require.Equal(t, webhook.Permanent, res.Outcome)
}

// What the receiver prints is one line a delivery, whatever the body holds: a payload may carry
// JSON's whitespace (a carriage return rewrites the terminal's line, a newline splits the record),
// and a body that is not JSON may carry anything.
func TestReceiverPrintsOneLineADelivery(t *testing.T) {
	srv, out, client := serve(t, 0)
	for id, body := range map[string]string{"task_1": "{\"a\":\r\n\t[1,\r 2]}", "task_2": "not json\r\x1b[2Kgone"} {
		require.Equal(t, webhook.Delivered, client.Deliver(t.Context(), webhook.Request{ID: id, URL: srv.URL, Payload: []byte(body)}).Outcome)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	slices.Sort(lines)
	require.Equal(t, []string{`task_1 {"a":[1,2]}`, `task_2 "not json\r\x1b[2Kgone"`}, lines)
}

// serve starts the receiver (failing each delivery's first fail attempts) on loopback, with what
// it prints, and a deliverer that signs with its secret.
func serve(t *testing.T, fail int) (*httptest.Server, *bytes.Buffer, *webhook.Client) {
	t.Helper()
	h, err := newHandler(config.LocalWebhookSecret, fail)
	require.NoError(t, err)
	out := &bytes.Buffer{}
	h.out = out
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	key, err := webhook.ParseSecret(config.LocalWebhookSecret)
	require.NoError(t, err)
	return srv, out, webhook.New(webhook.Config{Key: key, AllowLoopback: true, Timeout: 5 * time.Second})
}
