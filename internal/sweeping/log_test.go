package sweeping_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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

// An idle invocation of the scheduled sweeper (AWS invokes one every minute on every shard) says
// that it is done at debug level only; an invocation that settled something says so at info.
func TestHandleAgentLogsAnIdleInvocationAtDebug(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	out := &logged{}
	log := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := sweeping.New(store.Sweeping(), scheduled(sweeping.Config{Grace: new(time.Duration(0)), Logger: log}))

	_, err := invoke(s, workWindow)
	require.NoError(t, err)
	require.Equal(t, []string{"DEBUG"}, out.levels(t, "sweeper: agent done"), "nothing was due")

	pending(t, store, 2)
	res, err := invoke(s, workWindow)
	require.NoError(t, err)
	require.Equal(t, 2, res.Processed)
	require.Equal(t, []string{"INFO"}, out.levels(t, "sweeper: agent done"), "it settled events")
}
