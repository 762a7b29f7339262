package pagestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The pack against other packs and late events: whatever the interleaving of packs,
// late creates of old ids and folds, every event is in `events` or in its page, and once.

// steppedPack is a Store.PackPages run on a goroutine of its own that stops before the statements
// the test names (pagestore.WithPackSteps): the test moves it on one stop at a time, and interleaves
// another pack, creates and folds as it chooses.
type steppedPack struct {
	t      *testing.T
	db     *sql.DB
	conn   atomic.Int64 // the connection its transaction runs on
	at     chan string
	resume chan struct{}
	done   chan error
	paused bool
	ended  bool
	err    error
	events int64
}

func startPack(ctx context.Context, t *testing.T, store *wire.Stores) *steppedPack {
	p := &steppedPack{t: t, db: store.DB.Pool(), at: make(chan string), resume: make(chan struct{}), done: make(chan error, 1)}
	ctx = pagestore.WithPackSteps(ctx, func(tx *sql.Tx, step string) {
		var id int64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err == nil {
			p.conn.Store(id)
		}
		p.at <- step
		<-p.resume
	})
	go func() {
		_, n, err := store.Pages.PackPages(ctx, 1, time.Hour)
		p.events = n
		p.done <- err
	}()
	return p
}

// Outcomes of advance.
const (
	packPaused  = "paused"  // stopped before the statement named
	packWaiting = "waiting" // waiting for a row lock that someone else holds
	packDone    = "done"    // PackPages returned
)

// advance lets the pack run on until it is about to run stop (packPaused), or waits for a row lock
// (packWaiting), or has returned (packDone).
func (p *steppedPack) advance(stop string) string {
	p.t.Helper()
	if p.ended {
		return packDone
	}
	if p.paused {
		p.paused = false
		p.resume <- struct{}{}
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case step := <-p.at:
			if step == stop {
				p.paused = true
				return packPaused
			}
			p.resume <- struct{}{}
		case p.err = <-p.done:
			p.ended = true
			return packDone
		case <-time.After(5 * time.Millisecond):
			if p.waitingForALock() {
				return packWaiting
			}
		case <-deadline:
			p.t.Fatalf("the pack neither reached %q, nor waited for a lock, nor returned within 30 s", stop)
		}
	}
}

// finish lets the pack run to its end (through any lock wait) and returns what PackPages returned.
func (p *steppedPack) finish() (int64, error) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.advance("") != packDone {
		if time.Now().After(deadline) {
			p.t.Fatal("the pack did not end within 30 s")
		}
	}
	return p.events, p.err
}

// waitingForALock tells whether the pack's transaction waits for a row lock.
func (p *steppedPack) waitingForALock() bool {
	p.t.Helper()
	conn := p.conn.Load()
	if conn == 0 {
		return false
	}
	waits, err := mysqltest.WaitsForALock(context.Background(), p.db, conn)
	require.NoError(p.t, err)
	return waits
}

// auditOnce checks that every id of want is stored once, in `events` or in a page, and nothing else is.
func auditOnce(t *testing.T, store *wire.Stores, want []int64) {
	t.Helper()
	audit, err := mysqltest.AuditEvents(context.Background(), store.DB.Pool())
	require.NoError(t, err)
	stored := map[int64]int{}
	for _, a := range audit {
		stored[a.ID]++
	}
	var wrong []string
	for _, id := range want {
		if stored[id] != 1 {
			wrong = append(wrong, fmt.Sprintf("event %d stored %d times", id, stored[id]))
		}
	}
	require.Empty(t, wrong, "every event in events or in its page, and once")
	require.Len(t, audit, len(want), "nothing else is stored")
}

// The interleaving of the issue: two packs take the same unit of a page that has no row yet; both
// read its one folded event A and find no page row; the first inserts the page's row and deletes
// A; the second inserts a row too and deletes while the first has not committed; meanwhile a late
// event D of the unit (an id the store's block allocator handed out long before, created now) is
// processed and folded; then the first commits. Before the fix the second's delete, which waited
// for A, found A gone and D in its place, deleted one row as it had read one, and committed: D was
// in neither table and A in two page rows. Now packs take turns (TakePackTurn), and a pack locks
// the events it packs: the second finds the turn taken and packs nothing, and D is packed later.
func TestTwoPacksAndALateEventKeepEveryEventOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8)) // the block allocator: ids from 1 to 1,024 are this store's
	a, err := store.Events.CreatePendingBatch(ctx, 1)
	require.NoError(t, err)
	_, err = processIDs(ctx, store, false, a...)
	require.NoError(t, err)
	foldAll(t, store)
	// Other processes take the ids that follow: A's unit is far enough behind the counter to be
	// packed, it is the only one, and its page has no row.
	_, err = store.DB.Pool().ExecContext(ctx, "UPDATE status SET id = id + 3000")
	require.NoError(t, err)

	first, second := startPack(ctx, t, store), startPack(ctx, t, store)
	require.Equal(t, packPaused, first.advance("InsertPage"), "the first has read A and found no page row")
	t.Logf("the second, sent to its insert: %s", second.advance("InsertPage"))
	require.Equal(t, packPaused, first.advance("Commit"), "the first has written A's page row and deleted A")
	t.Logf("the second, sent to its commit: %s", second.advance("Commit"))

	// The late event: the store's next id, of A's unit, processed and folded now.
	d, err := store.Events.CreatePendingBatch(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, pages.UnitOf(a[0]), pages.UnitOf(d[0]), "an old id, of A's unit")
	_, err = processIDs(ctx, store, false, d...)
	require.NoError(t, err)
	foldAll(t, store)

	n1, err := first.finish()
	require.NoError(t, err)
	require.EqualValues(t, 1, n1, "the first packed A")
	n2, err := second.finish()
	require.NoError(t, err)
	t.Logf("the second packed %d events", n2)
	auditOnce(t, store, []int64{a[0], d[0]})
	_, err = store.Events.Get(ctx, d[0])
	require.NoError(t, err, "the late event is found")

	// And once packed, whoever packs it.
	_, _, err = store.Pages.PackPages(ctx, 10, time.Hour)
	require.NoError(t, err)
	auditOnce(t, store, []int64{a[0], d[0]})
	var left int
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&left))
	require.Zero(t, left, "both packed")
}

// Packs race each other, late creates of old ids and folds: four packers fold and pack a unit or
// two at a time as fast as they can, dawdling at random between their statements, while round
// after round a store whose block of ids is fresh (as an API's execution environment holds one)
// creates an event on a page nobody packed yet, the ids move on past it (other processes take
// them), and the store creates more events of the same unit late, from its block, while the
// packers take the unit. Every event is then in `events` or in its page, once, and the count is
// exact. (Before the fix a few rounds in a hundred and fifty lost a late event and stored
// another twice.)
func TestPackersLateCreatesAndFoldsRace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	db := store.DB.Pool()
	var created []int64
	var packed atomic.Int64
	createProcessed := func(s *wire.Stores) int64 {
		ids, err := s.Events.CreatePendingBatch(ctx, 1)
		require.NoError(t, err)
		created = append(created, ids...)
		_, err = processIDs(ctx, s, false, ids...)
		require.NoError(t, err)
		return ids[0]
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	loop := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // on a failure too: no packer outlives the test's database
	// The packers dawdle at random between their statements, so that their transactions overlap
	// each other's and the late events' in every way.
	jitter := func(max time.Duration) { time.Sleep(time.Duration(rand.Int64N(int64(max)))) }
	packCtx := pagestore.WithPackSteps(ctx, func(*sql.Tx, string) {
		if rand.IntN(2) == 0 {
			jitter(2 * time.Millisecond)
		}
	})
	for range 4 {
		loop(func() error {
			if _, err := store.Events.FoldSettled(ctx, 1000); err != nil {
				return err
			}
			_, n, err := store.Pages.PackPages(packCtx, 2, time.Hour)
			packed.Add(n)
			return err
		})
	}

	const rounds = 150
	for round := 0; round < rounds && len(errs) == 0; round++ {
		// A page nobody has packed: the ids up to it were taken by others.
		_, err := db.ExecContext(ctx, "UPDATE status SET id = (id DIV 10000 + 1) * 10000 + ?", rand.IntN(5000))
		require.NoError(t, err)
		late, err := wire.StoresOn(db, mysql.Config{BlockSize: 4 + rand.IntN(8)})
		require.NoError(t, err)
		first := createProcessed(late)
		// The ids move on: the unit can be packed as soon as its event is folded.
		_, err = db.ExecContext(ctx, "UPDATE status SET id = id + 2000 + ?", rand.IntN(2000))
		require.NoError(t, err)
		// The rest of the store's block, late, while the packers fold and pack the unit.
		for range 3 {
			jitter(3 * time.Millisecond)
			id := createProcessed(late)
			require.Less(t, id, first+4, "an id of the block the store took before the ids moved on")
		}
	}
	halt()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, packed.Load(), "the packers packed while the creates ran")

	// Whatever the packers left, packed now.
	_, err := db.ExecContext(ctx, "UPDATE status SET id = id + 3000")
	require.NoError(t, err)
	foldAll(t, store)
	_, _, err = store.Pages.PackPages(ctx, 100_000, time.Hour)
	require.NoError(t, err)
	auditOnce(t, store, created)
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(created), n, "the count")
}

// A read by id reads `events` first and the packed history second, so a pack that commits between
// its two reads cannot hide an event from it: an event the first read missed was packed before it.
// Forced: a pack runs to its commit between the reads (eventstore.WithBetweenTiers) of an event that
// is in `events` when the read begins, and of one packed before. (With the page read first, the
// first event, packed between the reads, was in neither read: not found.)
func TestAReadBetweenTheTiersMissesNoEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ids, err := store.Events.CreatePendingBatch(ctx, 2)
	require.NoError(t, err)
	_, err = processIDs(ctx, store, false, ids...)
	require.NoError(t, err)
	foldAll(t, store)
	// Other processes take the ids that follow: the events' unit is far enough behind the counter
	// to be packed.
	_, err = store.DB.Pool().ExecContext(ctx, "UPDATE status SET id = id + 3000")
	require.NoError(t, err)

	packs := 0
	between := eventstore.WithBetweenTiers(ctx, func() {
		packs++
		_, n, err := store.Pages.PackPages(ctx, 1, time.Hour)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the pack between the reads packs both events")
	})
	e, err := store.Events.Get(between, ids[0])
	require.NoError(t, err, "an event packed between a read's two reads is found")
	require.Equal(t, ids[0], e.ID)
	require.Zero(t, packs, "found in `events`, the read had no second read")

	// Now packed: the read misses it in `events` and finds it in its page, whatever happens
	// between.
	_, _, err = store.Pages.PackPages(ctx, 1, time.Hour)
	require.NoError(t, err)
	var left int
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&left))
	require.Zero(t, left, "both packed")
	e, err = store.Events.Get(eventstore.WithBetweenTiers(ctx, func() { packs++ }), ids[1])
	require.NoError(t, err)
	require.Equal(t, ids[1], e.ID)
	require.Equal(t, 1, packs, "a packed event is read from its page, after `events`")
	auditOnce(t, store, ids)
}
