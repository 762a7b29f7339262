package agents_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The standalone agent's stats line says how many pulses it made and how many failed.
func TestStatsLineCountsPulses(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	out := &lockedBuffer{}
	cfg := memberConfig("stats")
	cfg.Logger = slog.New(slog.NewJSONHandler(out, nil))
	a, err := agents.New(store, &processing.Engine{Store: store, By: exactlyonce.BySweeper}, agents.Config{Member: cfg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	go a.LogStatsEvery(ctx, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(out.String(), `"msg":"agent: stats"`) && strings.Contains(out.String(), `"state":"RUNNING"`) &&
			!strings.Contains(out.String(), `"pulses":0,`)
	}, 10*time.Second, 10*time.Millisecond, out.String())
	require.Contains(t, out.String(), `"pulseFailures":0`)
}
