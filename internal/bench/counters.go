package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// runCounters measures the counter service's cost per message (internal/counters,
// migrations/0008_counters.sql), through the store's batch transaction as the consumer runs it
// (counterstore.Store.ApplyCounterMessages, batches of 10, 8 concurrent consumers; the SQS side is not in
// the measurement):
//
//   - messages/s with 1,000,000 entities already stored (over 10,000 users and 3 types) beside
//     none, in alternating windows: a message reads one bucket row's directory, not the entities,
//     so the two should match (target >= 0.8x);
//   - all messages for one user (a hot key: every batch queues on that user's bucket lock) beside
//     messages spread over 10,000 users, on the empty database: reported, no target.
//
// Three of four messages add a new entity; the fourth reads one the same consumer added before.
func runCounters(ctx context.Context, r *run) error {
	const group = "counters"
	large := pick[int64](r, 1_000_000, 5_000)
	window := pick(r, 2*time.Second, 300*time.Millisecond)
	rounds := pick(r, 6, 1)
	const consumers, batch, users = 8, 10, 10_000
	types := []string{"message", "dialog", "mention"}

	type side struct {
		name   string
		store  *wire.Stores
		stored int64
	}
	open := func(name string, stored int64) (side, func(), error) {
		s, err := r.newScratch(ctx, "counters_"+name, true)
		if err != nil {
			return side{}, nil, err
		}
		db, err := s.open(consumers + 4)
		if err != nil {
			s.drop()
			return side{}, nil, err
		}
		stop := func() { db.Close(); s.drop() }
		if stored > 0 {
			t0 := time.Now()
			if err := mysqltest.LoadCounters(ctx, db, stored, users, types, func(done int64) {
				if done%100_000 == 0 {
					r.progress(group, "  %s: stored %d/%d entities (%.1f s)", name, done, stored, time.Since(t0).Seconds())
				}
			}); err != nil {
				stop()
				return side{}, nil, err
			}
		}
		store, err := wire.StoresOn(db, mysql.Config{})
		if err != nil {
			stop()
			return side{}, nil, err
		}
		return side{name: name, store: store, stored: stored}, stop, nil
	}

	var seq atomic.Int64
	// measure runs the consumers against sd for one window and returns the messages applied and
	// the time taken; userOf picks a message's user.
	measure := func(sd side, userOf func(rng *rand.Rand) string) (int64, time.Duration, error) {
		var applied atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, consumers)
		deadline := time.Now().Add(window)
		t0 := time.Now()
		for w := range consumers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
				var added []exactlyonce.CounterMessage
				for time.Now().Before(deadline) {
					msgs := make([]exactlyonce.CounterMessage, 0, batch)
					for len(msgs) < batch {
						if len(added) > 0 && rng.IntN(4) == 0 {
							m := added[len(added)-1]
							added = added[:len(added)-1]
							m.Action = exactlyonce.CounterRead
							msgs = append(msgs, m)
							continue
						}
						m := exactlyonce.CounterMessage{EntityID: fmt.Sprint("bench-", seq.Add(1)), EntityType: types[rng.IntN(len(types))],
							UserID: userOf(rng), Action: exactlyonce.CounterAdded}
						added = append(added, m)
						msgs = append(msgs, m)
					}
					if _, err := sd.store.Counters.ApplyCounterMessages(ctx, msgs); err != nil {
						errs <- err
						return
					}
					applied.Add(int64(len(msgs)))
				}
			}()
		}
		wg.Wait()
		close(errs)
		return applied.Load(), time.Since(t0), <-errs
	}
	spread := func(rng *rand.Rand) string { return fmt.Sprint("seed-user-", rng.IntN(users)) }
	hot := func(*rand.Rand) string { return "hot-user" }

	r.progress(group, "storing %d entities", large)
	empty, stopEmpty, err := open("empty", 0)
	if err != nil {
		return err
	}
	defer stopEmpty()
	full, stopFull, err := open("stored", large)
	if err != nil {
		return err
	}
	defer stopFull()

	// One untimed window on each side first: the load has just written a million rows, which InnoDB
	// flushes in the background for a while, and each side's first batches warm its caches.
	for _, sd := range []side{full, empty} {
		if _, _, err := measure(sd, spread); err != nil {
			return fmt.Errorf("warm-up %s: %w", sd.name, err)
		}
	}

	type total struct {
		n    int64
		took time.Duration
	}
	totals := map[string]*total{"empty": {}, "stored": {}, "hot": {}}
	for round := range rounds {
		runs := []struct {
			key  string
			sd   side
			user func(*rand.Rand) string
		}{{"empty", empty, spread}, {"stored", full, spread}, {"hot", empty, hot}}
		if round%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, ru := range runs {
			n, took, err := measure(ru.sd, ru.user)
			if err != nil {
				return fmt.Errorf("%s: %w", ru.key, err)
			}
			totals[ru.key].n += n
			totals[ru.key].took += took
			r.progress(group, "round %d/%d %-6s %7.0f messages/s", round+1, rounds, ru.key, float64(n)/took.Seconds())
		}
	}
	rate := func(k string) float64 { return float64(totals[k].n) / totals[k].took.Seconds() }
	emptyRow := Row{Group: group, Name: "counters_empty_mps", Value: rate("empty"), Unit: "messages/s",
		Note: fmt.Sprintf("no entity stored; %d consumers, batches of %d, over %d users and %d types", consumers, batch, users, len(types))}
	storedRow := Row{Group: group, Name: "counters_stored_mps", Value: rate("stored"), Unit: "messages/s",
		Note: fmt.Sprintf("%d entities stored; same load", large)}
	hotRow := Row{Group: group, Name: "counters_hot_key_mps", Value: rate("hot"), Unit: "messages/s",
		Note: "every message for one user (one bucket lock), on the empty database"}
	r.add(emptyRow, storedRow, hotRow,
		ratio(group, "counters_stored_ratio", storedRow, emptyRow, atLeast(0.8),
			fmt.Sprintf("messages/s with %d entities stored vs none, %d rounds of %s", large, rounds, window)),
		ratio(group, "counters_hot_key_ratio", hotRow, emptyRow, nil, "one user vs 10,000 users: reported, no target"))

	// The counts the run left are right: reconcile every bucket of both databases.
	all := make([]int64, counterstore.CounterBuckets)
	for i := range all {
		all[i] = int64(i)
	}
	for _, sd := range []side{empty, full} {
		checked, bad, err := sd.store.Counters.ReconcileCounters(ctx, all, 200)
		r.check(group, fmt.Sprintf("200 counts of the %s database each equal their counted entities", sd.name),
			err == nil && len(bad) == 0 && checked > 0, fmt.Sprintf("checked %d, wrong %d, err %v", checked, len(bad), err))
	}
	return nil
}
