package sweeping_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// logged keeps JSON log lines.
type logged struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logged) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// levels returns the level of each record with message msg, in order, and forgets every line.
func (l *logged) levels(t *testing.T, msg string) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == msg {
			out = append(out, rec["level"].(string))
		}
	}
	l.buf.Reset()
	return out
}

// An idle sweeper (the local runner invokes one every few seconds, AWS every minute) says that it
// swept at debug level only; a sweep that settled something says so at info.
func TestHandleLogsAnIdleSweepAtDebug(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	out := &logged{}
	log := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := sweeping.New(store.Sweeping(), sweeping.Config{Grace: -1, Logger: log})
	ctx := context.Background()

	_, err := s.Handle(ctx, events.CloudWatchEvent{})
	require.NoError(t, err)
	require.Equal(t, []string{"DEBUG"}, out.levels(t, "sweeper: sweep done"), "nothing was due")

	pending(t, store, 2)
	res, err := s.Handle(ctx, events.CloudWatchEvent{})
	require.NoError(t, err)
	require.Equal(t, 2, res.Processed)
	require.Equal(t, []string{"INFO"}, out.levels(t, "sweeper: sweep done"), "it settled events")
}
