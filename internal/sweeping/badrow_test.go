package sweeping_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// failFor is a plain event's work that fails for one event: a value generator that cannot give
// that event a value.
type failFor struct {
	id     int64
	leased bool
}

func (w failFor) Inline() bool { return !w.leased }

func (w failFor) Do(_ context.Context, e exactlyonce.Event) (exactlyonce.Result, error) {
	if e.ID == w.id {
		return exactlyonce.Result{}, errors.New("no value for this one")
	}
	return exactlyonce.Result{Value: "ok"}, nil
}

// One bad row must not stop every sweep: the rest of its batch and every later batch proceed, and
// the bad row is tried again (after a backoff) a bounded number of times, then marked failed with
// the reason, visible in the event.
func TestOneBadEventDoesNotStopTheSweeps(t *testing.T) {
	t.Parallel()
	for _, leased := range []bool{false, true} {
		name := map[bool]string{false: "inline", true: "leased"}[leased]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
			ctx := context.Background()
			var ids []int64
			for range 25 {
				id, err := store.Events.CreatePending(ctx)
				require.NoError(t, err)
				ids = append(ids, id)
			}
			bad := ids[0] // the first row of the table: a claim without order meets it first
			sweeper := func(bad int64, backoff time.Duration) *sweeping.Sweeper {
				return sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), BatchSize: 10, Logger: testLogger(t),
					Engine: processing.Engine{Works: exactlyonce.Works{exactlyonce.KindPlain: failFor{id: bad, leased: leased}},
						Backoff: exactlyonce.Backoff{MaxAttempts: 3, Base: backoff, Max: backoff}}})
			}
			// A backoff is drawn in (0, Base]: a day, so that this sweep's later batches do not meet the
			// bad event due again, however slowly they run.
			s := sweeper(bad, 24*time.Hour)

			res, err := s.Sweep(ctx)
			require.NoError(t, err, "a failing event is not the sweep's failure")
			require.Equal(t, 24, res.Processed, "every other event settled in the same sweep")
			for _, id := range ids[1:] {
				e, err := store.Events.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, "processed", e.State.String())
			}
			e, err := store.Events.Get(ctx, bad)
			require.NoError(t, err)
			require.Equal(t, "pending", e.State.String(), "the bad event waits its backoff")

			// Its retries, with backoffs of milliseconds, on a second bad event (the first waits its day).
			bad, err = store.Events.CreatePending(ctx)
			require.NoError(t, err)
			s = sweeper(bad, 20*time.Millisecond)
			testutil.Eventually(t, time.Minute, "the bad event is marked failed after its attempts", func() bool {
				_, err := s.Sweep(ctx)
				require.NoError(t, err)
				e, err = store.Events.Get(ctx, bad)
				require.NoError(t, err)
				return e.State.String() == "failed"
			})
			require.Equal(t, 3, e.Attempts)
			require.Equal(t, "no value for this one", e.LastError)
			require.Nil(t, e.Value)

			// Failed for good: never claimed again.
			res, err = s.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, sweeping.Result{Batches: 1}, res)
		})
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
