package sweeping_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The fold and the archive's move run by two maintainers at once (two sweeper agents, or a sweeper
// and the local runner): one of them SIGKILLed inside the step (TestTwoMaintainersOneKilledLoseNothing's
// fold and archive cases), or both alive, one held inside the step while the other runs it whole
// (TestTwoMaintainersAtOnceLoseNothing).

// problems returns the message of every record at WARN or above, and forgets every line.
func (l *logged) problems(t *testing.T) []string {
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
		if lvl := rec["level"]; lvl == "WARN" || lvl == "ERROR" {
			out = append(out, fmt.Sprint(rec["msg"], " ", rec["err"]))
		}
	}
	l.buf.Reset()
	return out
}

// maintainWithin runs s's maintenance and fails the test if it has not returned within 30 s: the
// other maintainer is jammed.
func maintainWithin(ctx context.Context, t *testing.T, s *sweeping.Sweeper) int64 {
	t.Helper()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := s.Maintain(ctx)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		return r.n
	case <-time.After(30 * time.Second):
		t.Fatal("the other maintainer is jammed: its maintenance has not returned after 30 s")
		return 0
	}
}

// foldState is what the fold has done: the settled events not folded yet (`fresh`), the events
// folded (rows in `settled` and `failed`) and settled_count's number, each by a committed read.
type foldState struct{ fresh, folded, counted int64 }

func readFoldState(ctx context.Context, t *testing.T, db *sql.DB) foldState {
	t.Helper()
	var s foldState
	require.NoError(t, db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM events WHERE state >= 10 AND state < 30), "+
		"(SELECT COUNT(*) FROM events WHERE state >= 30), (SELECT n FROM settled_count)").Scan(&s.fresh, &s.folded, &s.counted))
	return s
}

// awaitWaitingFold returns once a connection other than not waits for a row lock in a fold's move
// (FoldSettled's UPDATE): the other maintainer, waiting for the events a fold holds.
func awaitWaitingFold(ctx context.Context, t *testing.T, db *sql.DB, not int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		waits, err := mysqltest.StatementWaitsForALock(ctx, db, not, "UPDATE events SET state = state + 20 WHERE")
		require.NoError(t, err)
		return waits
	}, 60*time.Second, 10*time.Millisecond, "the other maintainer's fold waits for the events the first one holds")
}

// Killed in the fold: a real maintainer process folding 1,000 events a transaction is SIGKILLed
// in its second fold transaction, its first committed, the next 1,000 events moved, before its
// addition ("AddSettled") or with its addition made (settled_count's row held too) before its
// commit ("Commit"). The other maintainer's fold waits for the moved events (seen waiting: an
// UPDATE cannot skip locked rows), and once the kill rolls that transaction back it folds them and
// the rest in the same maintenance: each event folded and counted once, the count exact. A fold
// that committed its move before its addition loses the held batch from the count, killed at
// AddSettled (2,000 of 3,000); one whose addition committed apart from its move counts the batch
// twice, killed at Commit (4,000 of 3,000).
func twoMaintainersOneKilledInTheFold(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"AddSettled", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db, dsn := testdb.DB(t, 8)
			store, err := wire.StoresOn(db, mysql.Config{})
			require.NoError(t, err)
			const events, batch = 3000, 1000
			_, err = mysqltest.LoadProcessed(ctx, db, events, nil)
			require.NoError(t, err)

			killed, line := startKilled(t, "maintainer", "at "+step+" ", "DB_DSN="+dsn, "FOLD_BATCH=1000",
				"KILL_FIRST=FoldSettled", "KILL_AT="+step, "KILL_TX=2")
			var conn int64
			_, err = fmt.Sscanf(line, "at "+step+" conn %d", &conn)
			require.NoError(t, err, line)
			require.Equal(t, foldState{fresh: events - batch, folded: batch, counted: batch}, readFoldState(ctx, t, db),
				"the killed one's first fold committed, its second not yet")

			var logs logged
			s := sweeping.New(store.Sweeping(), sweeping.Config{KeepHistory: true, FoldBatch: batch,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			type result struct {
				n   int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := s.Maintain(ctx)
				done <- result{n, err}
			}()
			awaitWaitingFold(ctx, t, db, conn)
			killAndAwait(ctx, t, killed, db, conn)
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("the other maintainer is jammed")
			}
			require.NoError(t, r.err)
			require.Empty(t, logs.problems(t))
			require.Equal(t, foldState{folded: events, counted: events}, readFoldState(ctx, t, db), "each event folded and counted once")
			require.EqualValues(t, events-batch, r.n, "the other folded the rest, the killed one's rolled-back batch with it, in the same maintenance")
			n, err := store.Events.Count(ctx)
			require.NoError(t, err)
			require.EqualValues(t, events, n)
		})
	}
}

// archivedHistory is a history of events packed into page 0 (ids handed out past it), on a
// database whose stores move pages to a fresh bucket of the local S3.
type archivedHistory struct {
	store  *wire.Stores
	db     *sql.DB
	dsn    string
	bucket string
	a      *archive.Bucket
	values map[int64]string
}

func newArchivedHistory(ctx context.Context, t *testing.T, events int64) archivedHistory {
	t.Helper()
	db, dsn := testdb.DB(t, 8)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	client := locals3.Client(t)
	bucket := locals3.Bucket(t, client)
	a := archive.New(client, bucket, 0)
	store.WithArchive(a)
	_, err = mysqltest.LoadProcessed(ctx, db, events, nil)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	// Folded and packed, and kept (younger than the window).
	_, err = sweeping.New(store.Sweeping(), sweeping.Config{Retention: new(time.Hour), PackBudget: time.Minute}).Maintain(ctx)
	require.NoError(t, err)
	h := archivedHistory{store: store, db: db, dsn: dsn, bucket: bucket, a: a, values: map[int64]string{}}
	_, paged := h.tiers(ctx, t)
	require.EqualValues(t, events, paged, "packed")
	rows, err := db.QueryContext(ctx, "SELECT id, value FROM events")
	require.NoError(t, err)
	defer rows.Close()
	require.False(t, rows.Next(), "nothing left in events")
	require.NoError(t, rows.Err())
	for id := int64(1); id <= events; id++ {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err, id)
		require.NotNil(t, e.Value, id)
		h.values[id] = *e.Value
	}
	return h
}

// tiers returns the archive's tier (GET /history's) and the page rows' events (counted in them),
// and checks that the tiers add up to the count.
func (h archivedHistory) tiers(ctx context.Context, t *testing.T) (exactlyonce.ArchiveTier, int64) {
	t.Helper()
	tiers, err := h.store.Events.HistoryTiers(ctx)
	require.NoError(t, err)
	require.NotNil(t, tiers.Archive)
	_, paged, err := mysqltest.PageRowCounts(ctx, h.db)
	require.NoError(t, err)
	n, err := h.store.Events.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, n, tiers.EventRows+paged+tiers.Archive.Events, "the tiers add up to the count: %+v, %d in the page rows", tiers, paged)
	return *tiers.Archive, paged
}

// requireEachOnce checks that every event is read by id with its value, and is once across the
// tiers.
func (h archivedHistory) requireEachOnce(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	audit, err := mysqltest.AuditArchived(ctx, h.db, h.a)
	require.NoError(t, err)
	require.Len(t, audit, len(h.values), "%s: every event once, across the tiers", what)
	for id, v := range h.values {
		e, err := h.store.Events.Get(ctx, id)
		require.NoError(t, err, "%s: %d", what, id)
		require.Equal(t, v, *e.Value, "%s: %d", what, id)
	}
	n, err := h.store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(h.values), n, what)
}

// awaitTurnFree returns once nobody holds the packs' turn (pack_turn's row): a killed process's
// transaction that held it was rolled back whole, its other locks released with it.
func awaitTurnFree(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	require.Eventually(t, func() bool {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM pack_turn FOR UPDATE SKIP LOCKED").Scan(&n))
		return n == 1
	}, 60*time.Second, 10*time.Millisecond, "the killed maintainer's transaction is rolled back")
}

// Killed in the archive's move: a real maintainer process moving page 0 (1,000 events) is
// SIGKILLed at each of the move's steps: before it reads the page's rows ("Read"), before its PUT
// ("Put"), after it, before it reads the object back ("Verify": the page in both tiers), before its
// delete ("Delete"), none of which holds a lock, or inside the transaction that deletes the page's
// rows ("Commit": the packs' turn, the page's rows and history_archive's row held). The other
// maintainer's maintenance returns without a warning (30 s at most, or the test fails as jammed):
// killed before Commit, it moves the page whole at once (over the killed one's object if it wrote
// one); killed at Commit, its pack and its move pass the taken turn by and leave the page (written
// again, merged, in the bucket), and its next maintenance after the kill moves it. Then page 0 has no rows, the archive counts the page once and its events once, every
// event reads by id as before and is once across the tiers, and the count is exact.
func twoMaintainersOneKilledInTheArchive(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"Read", "Put", "Verify", "Delete", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const events = 1000
			h := newArchivedHistory(ctx, t, events)

			killed, _ := startKilled(t, "maintainer", "at "+step+" of page 0", "DB_DSN="+h.dsn, "PACK=1", "RETENTION=0s",
				"ARCHIVE_KILL_AT="+step, "KILL_TX=0", "HISTORY_BUCKET="+h.bucket, "AWS_ENDPOINT_URL_S3="+locals3.Endpoint(t),
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
			h.requireEachOnce(ctx, t, "killed one held at "+step)

			var logs logged
			s := sweeping.New(h.store.Sweeping(), sweeping.Config{Retention: new(time.Duration(0)), PackBudget: time.Minute,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			maintainWithin(ctx, t, s)
			require.Empty(t, logs.problems(t), "the other's maintenance, the killed one held at %s", step)
			arch, paged := h.tiers(ctx, t)
			if step == "Commit" {
				require.EqualValues(t, events, paged, "the other passed the held page by")
				require.Zero(t, arch.Events)
			} else {
				require.Zero(t, paged, "the other moved the page whose object the killed one wrote")
				require.Equal(t, exactlyonce.ArchiveTier{Pages: 1, Events: events}, arch)
			}
			h.requireEachOnce(ctx, t, "the other's maintenance beside the held one")

			killed.Kill()
			awaitTurnFree(ctx, t, h.db)
			maintainWithin(ctx, t, s)
			require.Empty(t, logs.problems(t), "the other's next maintenance")
			arch, paged = h.tiers(ctx, t)
			require.Zero(t, paged, "page 0 has no rows left")
			require.Equal(t, exactlyonce.ArchiveTier{Pages: 1, Events: events}, arch, "the page and its events counted once")
			h.requireEachOnce(ctx, t, "after the kill")
		})
	}
}

// Invariant: two maintainers run the fold, or the archive's move, at once, both alive, one held
// inside its step while the other runs its maintenance whole: nothing is lost, written twice or
// counted twice, and neither is jammed. The fold: the first held before the commit of its first
// transaction (1,000 events moved and counted, settled_count's row held), the second's fold waits
// for those events (seen waiting) and, once the first commits, the two fold the other 1,500
// side by side: 2,500 folded between them, each moved and counted once. The move: the first held after its PUT and
// read-back ("Delete": no lock held), the second moves the page whole, and the first's delete then
// finds the rows gone and counts nothing (with that check taken out, the archive counts 2,000
// events of 1,000: the test fails); or the first held inside its delete's transaction ("Commit":
// the turn held), the second passes the turn by and returns, the first commits: the page moved
// once, counted once, every event read as before.
func TestTwoMaintainersAtOnceLoseNothing(t *testing.T) {
	t.Parallel()
	t.Run("fold", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		db := testdb.Core(t, mysql.Config{}, 8)
		store := wire.NewStores(db)
		const events, batch = 2500, 1000
		_, err := mysqltest.LoadProcessed(ctx, db.Pool(), events, nil)
		require.NoError(t, err)

		arrived, release := make(chan int64), make(chan struct{})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		defer releaseOnce() // on a failure too: the held fold ends before the test's database goes
		first := 0
		held := eventstore.WithFoldSteps(ctx, func(tx *sql.Tx, step string) {
			if step == "FoldSettled" {
				first++
			}
			if step == "Commit" && first == 1 {
				var conn int64
				if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
					t.Error(err)
				}
				arrived <- conn
				<-release
			}
		})
		newSweeper := func(logs *logged) *sweeping.Sweeper {
			return sweeping.New(store.Sweeping(), sweeping.Config{KeepHistory: true, FoldBatch: batch,
				Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		}
		var logsA, logsB logged
		type result struct {
			n   int64
			err error
		}
		a, b := make(chan result, 1), make(chan result, 1)
		go func() {
			n, err := newSweeper(&logsA).Maintain(held)
			a <- result{n, err}
		}()
		conn := <-arrived
		go func() {
			n, err := newSweeper(&logsB).Maintain(ctx)
			b <- result{n, err}
		}()
		awaitWaitingFold(ctx, t, db.Pool(), conn)
		releaseOnce()
		ra, rb := <-a, <-b
		require.NoError(t, ra.err)
		require.NoError(t, rb.err)
		require.Empty(t, logsA.problems(t))
		require.Empty(t, logsB.problems(t))
		require.GreaterOrEqual(t, ra.n, int64(batch), "the held one folded its batch, and then raced the other")
		require.EqualValues(t, events, ra.n+rb.n, "the two folded every event, each once")
		require.Equal(t, foldState{folded: events, counted: events}, readFoldState(ctx, t, db.Pool()), "each event folded and counted once")
		n, err := store.Events.Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, events, n)
	})
	for _, step := range []string{"Delete", "Commit"} {
		t.Run("archive/"+step, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const events = 1000
			h := newArchivedHistory(ctx, t, events)
			arrived, release := make(chan struct{}), make(chan struct{})
			releaseOnce := sync.OnceFunc(func() { close(release) })
			defer releaseOnce() // on a failure too
			held := pagestore.WithArchiveSteps(ctx, func(page int64, at string) {
				if at == step && page == 0 {
					close(arrived)
					<-release
				}
			})
			var logsA, logsB logged
			newSweeper := func(logs *logged) *sweeping.Sweeper {
				return sweeping.New(h.store.Sweeping(), sweeping.Config{Retention: new(time.Duration(0)), PackBudget: time.Minute,
					Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			}
			a := make(chan error, 1)
			go func() {
				_, err := newSweeper(&logsA).Maintain(held)
				a <- err
			}()
			<-arrived
			maintainWithin(ctx, t, newSweeper(&logsB))
			require.Empty(t, logsB.problems(t), "the other's maintenance, the first held at %s", step)
			arch, paged := h.tiers(ctx, t)
			if step == "Commit" {
				require.EqualValues(t, events, paged, "the other passed the held page by")
			} else {
				require.Zero(t, paged, "the other moved the page")
				require.Equal(t, exactlyonce.ArchiveTier{Pages: 1, Events: events}, arch)
			}
			releaseOnce()
			require.NoError(t, <-a)
			require.Empty(t, logsA.problems(t), "the held one's maintenance")
			arch, paged = h.tiers(ctx, t)
			require.Zero(t, paged, "page 0 has no rows left")
			require.Equal(t, exactlyonce.ArchiveTier{Pages: 1, Events: events}, arch, "the page and its events counted once")
			h.requireEachOnce(ctx, t, "both done")
		})
	}
}
