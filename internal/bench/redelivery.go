package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// redeliveryBatch is the number of events one redelivered batch names: a processor batch of 10
// messages, each naming one event.
const redeliveryBatch = 10

// redeliveries measures the processor's path for messages whose events are settled already
// (duplicates and redeliveries, which the queue delivers at least once): batches of
// redeliveryBatch random ids among the n settled events from first, each a claim that takes
// nothing followed by the read that tells the ids apart (Store.Outcomes). That read used to scan
// the settled history (an id list hashes to every subpartition); it now reads the `open` partition
// and the counter. It returns the batches per second over batches batches, and fails if any id
// is not reported settled.
func redeliveries(ctx context.Context, db *sql.DB, first, n int64, batches int) (float64, error) {
	store, err := wire.StoresOn(db, mysql.Config{}) // the store as shipped: every default
	if err != nil {
		return 0, err
	}
	engine := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.ByProcessor}
	rng := rand.New(rand.NewPCG(uint64(first), uint64(n)))
	ids := make([]int64, redeliveryBatch)
	start := time.Now()
	for range batches {
		for i := range ids {
			ids[i] = first + rng.Int64N(n)
		}
		out, err := engine.ProcessIDs(ctx, ids)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			if out[id] != exactlyonce.OutcomeAlreadySettled {
				return 0, errRedelivery{id: id, got: out[id]}
			}
		}
	}
	return float64(batches) / time.Since(start).Seconds(), nil
}

type errRedelivery struct {
	id  int64
	got exactlyonce.Outcome
}

func (e errRedelivery) Error() string {
	return fmt.Sprintf("redelivered event %d reported %s, not already settled", e.id, e.got)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
