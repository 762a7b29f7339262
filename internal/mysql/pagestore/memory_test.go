package pagestore_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// heapPeak samples the bytes of the heap's objects until stop is called, and returns their peak.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() uint64 {
		once.Do(func() { close(done); <-ended })
		return peak
	}
}

// packHeap packs as the sweeper does (a batch of 10 units) with the heap sampled, in the child role
// "heap-packer": the garbage collector runs at a tenth of growth, so that the heap's peak is what
// the pack holds, not what it let go. It prints the units and events packed, the heap before and
// its peak during the pack.
func packHeap(store *wire.Stores) error {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	base := heapPeak()()
	stop := heapPeak()
	units, events, err := store.Pages.PackPages(context.Background(), 10, time.Hour)
	peak := stop()
	if err != nil {
		return err
	}
	fmt.Printf("packed %d units, %d events, heap %d base %d peak\n", units, events, base, peak)
	return nil
}

// A pack's memory is bounded by bytes, not by the events of its units: a unit of tasks
// of the largest payload the API accepts, some of them every byte of which the driver escapes, is
// packed holding a few reads' worth of them, not the unit, into as few page rows as a row's bound
// allows; every task reads back whole. The pack runs in a child process ("heap-packer",
// packHeap), whose heap holds nothing else, so that the test runs beside the others (it ran alone,
// measuring this process's heap, 13 s of the package's time during which no other test ran).
func TestAPackOfLargePayloadsIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, dsn := testdb.DB(t, 4)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const tasks = 600
	// Folded, delivered tasks of unit 1 (ids 1000-1599: 150 MiB of payloads), as the sweeper leaves
	// them, with an attempt each; written by the server, so that this process holds none of it.
	// Every fourth payload is a JSON string of backslashes (every byte of it is two in a statement).
	const size = exactlyonce.MaxTaskPayloadBytes
	for lo := 1000; lo < 1000+tasks; lo += 20 {
		var rows, attempts []string
		for id := lo; id < lo+20; id++ {
			payload := fmt.Sprintf(`CONCAT('{"n":"', REPEAT('x', %d), '"}')`, size-8)
			if id%4 == 0 {
				payload = fmt.Sprintf(`CONCAT('"', REPEAT('\\\\', %d), '"')`, (size-2)/2) // '\\\\' is two backslashes
			}
			rows = append(rows, fmt.Sprintf(`(%d, 'task', %d, 30, NOW(6), NOW(6), 'sweeper', 1, 1, 'HTTP 200', 'https://example.com/hook', %s,
				'ref-big', 3, %d, 'c%d')`, id, taskstore.ReferenceHash("ref-big"), payload, id, id))
			attempts = append(attempts, fmt.Sprintf(`(%d, 1, NOW(6), 1200, 200, NULL, 'c%d')`, id, id))
		}
		_, err := db.ExecContext(ctx, `INSERT INTO events (id, kind, routing_hash, state, created_at, processed_at, processed_by,
			process_count, attempts, value, url, payload, reference_id, max_retries, position, claim_id) VALUES `+strings.Join(rows, ", "))
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, `INSERT INTO task_attempts (event_id, number, started_at, duration_us, status, error, claim_id)
			VALUES `+strings.Join(attempts, ", "))
		require.NoError(t, err)
	}
	_, err = db.ExecContext(ctx, "UPDATE status SET id = 4000")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE settled_count SET n = n + ?", tasks)
	require.NoError(t, err)
	var stored int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT SUM(LENGTH(payload)) FROM events").Scan(&stored))
	require.EqualValues(t, tasks*size, stored)

	// The pack, in a process of its own with its heap sampled (packHeap).
	packer := child.Start(t, "heap-packer", "DB_DSN="+dsn)
	line, err := packer.WaitLine("packed ", 5*time.Minute)
	require.NoError(t, err, "the packer packed: %v", packer.Output())
	var units, events, base, peak int64
	_, err = fmt.Sscanf(line, "packed %d units, %d events, heap %d base %d peak", &units, &events, &base, &peak)
	require.NoError(t, err, line)
	require.EqualValues(t, 1, units)
	require.EqualValues(t, tasks, events)
	held := peak - base
	t.Logf("packed %d MiB of payloads holding at most %.1f MiB more heap", stored>>20, float64(held)/(1<<20))
	require.Less(t, held, stored/3, "the pack holds a read's worth of the unit and a statement, not the unit")

	var rows int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM event_pages WHERE page = 0").Scan(&rows))
	t.Logf("%d page rows", rows)
	require.LessOrEqual(t, rows, int(stored/(pagestore.PackRowBytes-size))+2,
		"rows of the most a row holds, each at most one task short of it, but the last")
	for _, id := range []int64{1000, 1001, 1350, 1599} {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err, id)
		require.Len(t, e.Task.Payload, size, id)
		a, err := store.Tasks.Attempts(ctx, id)
		require.NoError(t, err, id)
		require.Len(t, a, 1, id)
	}
	count, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, tasks, count)
}
