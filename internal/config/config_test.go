package config_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d"}))
	require.NoError(t, err)
	require.True(t, c.Migrate)
	require.Equal(t, "block", c.Store.Allocator)
	require.Equal(t, 1024, c.Store.BlockSize)
	require.Equal(t, 4, c.DB.MaxOpenConns)
	require.Equal(t, 10*time.Second, c.SweepGrace)
	require.Equal(t, slog.LevelInfo, c.LogLevel)
}

func TestAWSStyleConfiguration(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_HOST": "proxy.example", "DB_USER": "admin", "DB_IAM_AUTH": "true",
		"AWS_REGION": "eu-west-1", "QUEUE_URL": "https://sqs/q", "ALLOCATOR": "literal", "LOG_LEVEL": "debug"}))
	require.NoError(t, err)
	require.True(t, c.DB.IAMAuth)
	require.Equal(t, "eu-west-1", c.DB.Region)
	require.Equal(t, "events", c.DB.Name)
	require.Equal(t, "literal", c.Store.Allocator)
	require.Equal(t, slog.LevelDebug, c.LogLevel)
}

func TestEveryBadValueIsReported(t *testing.T) {
	t.Parallel()
	_, err := config.Load(env(map[string]string{"DB_PORT": "x", "DB_MIGRATE": "maybe", "ALLOCATOR": "fast",
		"SWEEP_GRACE": "soon", "SWEEP_BATCH_SIZE": "0", "LOG_LEVEL": "loud"}))
	require.Error(t, err)
	for _, want := range []string{"DB_DSN, or DB_HOST and DB_USER", "DB_PORT", "DB_MIGRATE", "ALLOCATOR", "SWEEP_GRACE", "SWEEP_BATCH_SIZE", "LOG_LEVEL"} {
		require.ErrorContains(t, err, want)
	}
}

// A retried SQS attempt is logged with its cause; an error that is not retried is left to the caller.
func TestSQSRetryerLogsWhyItRetries(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	r := config.SQSRetryer(slog.New(slog.NewTextHandler(&logs, nil)))
	unavailable := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 503}},
		Err: errors.New("queue service unavailable")}
	require.True(t, r.IsErrorRetryable(unavailable))
	require.Contains(t, logs.String(), "retrying")
	require.Contains(t, logs.String(), "queue service unavailable")

	logs.Reset()
	require.False(t, r.IsErrorRetryable(errors.New("not retryable")))
	require.Empty(t, logs.String())
}
