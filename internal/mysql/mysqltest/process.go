package mysqltest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// FixedValue is the value FixedWorks gives event id.
func FixedValue(id int64) string { return fmt.Sprintf("v%d", id) }

// FixedWorks gives plain events the value FixedValue, through the one-transaction path or, leased,
// through the lease path.
func FixedWorks(leased bool) exactlyonce.Works {
	return exactlyonce.Works{exactlyonce.KindPlain: exactlyonce.ValueWork{New: FixedValue, Leased: leased}}
}

// ProcessIDs processes ids as the processor does, in the one processing shape.
func ProcessIDs(ctx context.Context, store *wire.Stores, leased bool, ids ...int64) (map[int64]exactlyonce.Outcome, error) {
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.ByProcessor, Works: FixedWorks(leased)}
	return e.ProcessIDs(ctx, ids)
}

// ProcessDue processes one batch of due events as the sweeper does and returns how many it settled.
func ProcessDue(ctx context.Context, store *wire.Stores, leased bool, grace time.Duration, limit int) (int, error) {
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Works: FixedWorks(leased)}
	b, err := e.ProcessDue(ctx, grace, limit)
	return b.Settled, err
}

// Together runs n goroutines, released at once so that they race, and fails t with every error
// they return.
func Together(t *testing.T, n int, work func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := work(w); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
