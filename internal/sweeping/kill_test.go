package sweeping_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests, or, started again by a test in a child role: "maintainer", a process
// that runs the sweeper's maintenance once (packing the history, and moving it to the archive
// (HISTORY_BUCKET) older than RETENTION, if PACK is set; folding FOLD_BATCH events a transaction)
// and stops for good at the directory's, the pack's or the fold's step KILL_AT of its KILL_TX-th
// transaction (counted by their first step, KILL_FIRST), or at the archive's step ARCHIVE_KILL_AT;
// "counter-sweeper", a
// process that runs the counter service's sweep and stops for good once its publish has returned,
// before it marks what it published.
func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

func runChild(role string) int {
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	switch role {
	case "maintainer":
		first, killAt := os.Getenv("KILL_FIRST"), os.Getenv("KILL_AT")
		killTx, err := strconv.Atoi(os.Getenv("KILL_TX"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		txs := 0
		at := func(tx mysql.Conn, step string) {
			if step == first {
				txs++
			}
			if step != killAt || txs != killTx {
				return
			}
			var conn int64
			if err := tx.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Printf("at %s conn %d\n", step, conn)
			select {} // until killed
		}
		ctx := taskstore.WithDirectorySteps(context.Background(), at)
		ctx = pagestore.WithPackSteps(ctx, func(tx *sql.Tx, step string) { at(tx, step) })
		ctx = eventstore.WithFoldSteps(ctx, func(tx *sql.Tx, step string) { at(tx, step) })
		if archiveAt := os.Getenv("ARCHIVE_KILL_AT"); archiveAt != "" {
			ctx = pagestore.WithArchiveSteps(ctx, func(page int64, step string) {
				if step == archiveAt {
					fmt.Printf("at %s of page %d\n", step, page)
					select {} // until killed
				}
			})
		}
		cfg := sweeping.Config{KeepHistory: os.Getenv("PACK") == "", PackBudget: time.Minute, Logger: logger}
		if v := os.Getenv("FOLD_BATCH"); v != "" {
			if cfg.FoldBatch, err = strconv.Atoi(v); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
		}
		if v := os.Getenv("RETENTION"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			cfg.Retention = &d
		}
		s := sweeping.New(store.Sweeping(), cfg)
		if _, err := s.Maintain(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("done")
		return 0
	case "counter-sweeper":
		res := sweeping.SweepCounters(context.Background(), store.Counters,
			sweeping.Counters{Publisher: publishedThenKilled{}, RepublishAfter: -1, Batch: 100}, logger)
		fmt.Printf("done: %+v\n", res)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 2
}

// publishedThenKilled "publishes" the notifications (says their ids) and waits to be killed.
type publishedThenKilled struct{}

func (publishedThenKilled) Publish(_ context.Context, ns []counters.Notification) ([]string, error) {
	var ids []string
	for _, n := range ns {
		ids = append(ids, n.ID)
	}
	fmt.Printf("published %s\n", strings.Join(ids, ","))
	select {} // until killed
}

// startKilled starts a child in role with env, waits until it says prefix, and returns the line.
func startKilled(t *testing.T, role, prefix string, env ...string) (*child.Process, string) {
	t.Helper()
	c := child.Start(t, role, env...)
	line, err := c.WaitLine(prefix, 60*time.Second)
	require.NoError(t, err)
	return c, line
}

// killAndAwait SIGKILLs c and returns once the server has let its connection conn go (and so
// rolled its transaction back).
func killAndAwait(ctx context.Context, t *testing.T, c *child.Process, db *sql.DB, conn int64) {
	t.Helper()
	c.Kill()
	require.Eventually(t, func() bool {
		gone, err := mysqltest.ConnectionGone(ctx, db, conn)
		require.NoError(t, err)
		return gone
	}, 60*time.Second, 10*time.Millisecond, "the killed child's connection is closed")
}

// directoryBytes is what the directory's cells hold, in bytes (24 an entry), and its log's rows.
func directoryBytes(ctx context.Context, t *testing.T, store *wire.Stores) (cells, logRows int) {
	t.Helper()
	var cols []string
	for c := range 100 {
		cols = append(cols, fmt.Sprintf("LENGTH(d%d)", c))
	}
	db := store.DB.Pool()
	require.NoError(t, db.QueryRowContext(ctx, "SELECT SUM("+strings.Join(cols, " + ")+") FROM reference_directory").Scan(&cells))
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reference_directory_log").Scan(&logRows))
	return cells, logRows
}

// refIDs are reference ref's tasks as its listing gives them.
func refIDs(ctx context.Context, t *testing.T, store *wire.Stores, ref string) []int64 {
	t.Helper()
	got, err := store.Tasks.ReferenceTasks(ctx, ref, 0, 100)
	require.NoError(t, err)
	ids := make([]int64, len(got))
	for i, e := range got {
		ids[i] = e.ID
	}
	return ids
}

// Invariant: two agents run the sweeper's maintenance at once and one of them is SIGKILLed inside
// a transaction of the fold, the pack, the archive's move or the directory's upkeep, holding what
// it takes (or, in the move, between its PUT and its delete): the other is
// never jammed and nothing is lost or written twice. Killed in the pack (its fold committed, the
// pack's turn and its units' events held, their pages written, before its delete of the events),
// the other's pack passes the taken turn by and its maintenance returns, nothing packed; once
// the killed one's connection is gone, the other's next maintenance packs every event, each once
// in one tier, the count exact. Killed in the backfill (its progress row taken, the first
// unit's buckets held, before its commit), the other's backfill passes the taken row by and its
// maintenance returns (the directory not complete yet); once the killed one's connection is gone,
// the other's next maintenance finishes the backfill, each task's entry once. Killed in the
// compaction (a bucket held, its log moved into the cells and deleted, before its commit), the
// other's compaction waits for that bucket (seen waiting), and, the kill rolling the bucket back,
// moves it and every other bucket in the same maintenance: the log is empty, each entry once in
// its cell, every listing as before. Killed in the fold or in the archive's move: see
// twoMaintainersOneKilledInTheFold and twoMaintainersOneKilledInTheArchive.
func TestTwoMaintainersOneKilledLoseNothing(t *testing.T) {
	t.Parallel()
	t.Run("fold", twoMaintainersOneKilledInTheFold)
	t.Run("archive", twoMaintainersOneKilledInTheArchive)
	t.Run("backfill", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		db, dsn := testdb.DB(t, 8)
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		refs := []string{"both-a", "both-b", "both-c"}
		tasks := 0
		for round := range 3 {
			for _, ref := range refs {
				_, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, round)})
				require.NoError(t, err)
				tasks++
			}
			for range 5 {
				_, err := store.Events.CreatePendingBatch(ctx, 200)
				require.NoError(t, err)
			}
		}
		require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))

		killed, line := startKilled(t, "maintainer", "at Commit ", "DB_DSN="+dsn, "KILL_FIRST=TakeBackfill", "KILL_AT=Commit", "KILL_TX=1")
		var conn int64
		_, err = fmt.Sscanf(line, "at Commit conn %d", &conn)
		require.NoError(t, err, line)
		// A process of its own for the other maintainer (its store has not seen the directory
		// complete).
		other := wire.NewStores(store.DB)
		var logs logged
		s := sweeping.New(other.Sweeping(), sweeping.Config{KeepHistory: true, PackBudget: time.Minute,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		_, err = s.Maintain(ctx)
		require.NoError(t, err)
		require.Empty(t, logs.levels(t, "sweeper: backfilling the reference directory failed; it is tried again later"),
			"the other's backfill passed the taken row by, without waiting for it")
		var complete int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reference_backfill WHERE next_id >= until_id").Scan(&complete))
		require.Zero(t, complete, "not complete while the killed one held it")

		killAndAwait(ctx, t, killed, db, conn)
		_, err = s.Maintain(ctx)
		require.NoError(t, err)
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reference_backfill WHERE next_id >= until_id").Scan(&complete))
		require.Equal(t, 1, complete, "the other's next maintenance finished the backfill")
		cells, _ := directoryBytes(ctx, t, store)
		require.Equal(t, 24*tasks, cells, "each task's entry once")
		after := wire.NewStores(store.DB)
		for _, ref := range refs {
			require.Len(t, refIDs(ctx, t, after, ref), 3, ref)
		}
	})
	t.Run("pack", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		db, dsn := testdb.DB(t, 8)
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		const events = 3000
		_, err = mysqltest.LoadProcessed(ctx, db, events, nil)
		require.NoError(t, err)
		// Ids handed out past the history's pages, so that every unit of it can be packed.
		_, err = db.ExecContext(ctx, "UPDATE status SET id = id + 30000")
		require.NoError(t, err)
		tiers := func() (inEvents, packed int64) {
			t.Helper()
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&inEvents))
			_, packed, err := mysqltest.PageRowCounts(ctx, db)
			require.NoError(t, err)
			return inEvents, packed
		}

		// Killed inside its first pack (the turn and the first units' events held, their pages
		// written), after its fold committed.
		killed, line := startKilled(t, "maintainer", "at DeletePacked ", "DB_DSN="+dsn, "PACK=1", "KILL_FIRST=TakePackTurn", "KILL_AT=DeletePacked", "KILL_TX=1")
		var conn int64
		_, err = fmt.Sscanf(line, "at DeletePacked conn %d", &conn)
		require.NoError(t, err, line)
		var logs logged
		s := sweeping.New(store.Sweeping(), sweeping.Config{PackBudget: time.Minute, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		_, err = s.Maintain(ctx)
		require.NoError(t, err)
		require.Empty(t, logs.levels(t, "sweeper: packing the history failed; it is tried again later"),
			"the other's pack passed the taken turn by, without waiting for it")
		inEvents, packed := tiers()
		require.EqualValues(t, events, inEvents, "nothing packed while the killed one held the turn")
		require.Zero(t, packed)

		killAndAwait(ctx, t, killed, db, conn)
		_, err = s.Maintain(ctx)
		require.NoError(t, err)
		inEvents, packed = tiers()
		require.Zero(t, inEvents, "the other's next maintenance packed every event")
		require.EqualValues(t, events, packed, "each once")
		n, err := store.Events.Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, events, n)
	})
	t.Run("compaction", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		db, dsn := testdb.DB(t, 8)
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		var refs []string
		for i := range 12 {
			refs = append(refs, fmt.Sprintf("both-%d", i))
		}
		for round := range 2 {
			for _, ref := range refs {
				_, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, round)})
				require.NoError(t, err)
			}
		}
		before := map[string][]int64{}
		for _, ref := range refs {
			before[ref] = refIDs(ctx, t, store, ref)
		}

		killed, line := startKilled(t, "maintainer", "at Commit ", "DB_DSN="+dsn, "KILL_FIRST=LockTaskBuckets", "KILL_AT=Commit", "KILL_TX=1")
		var conn int64
		_, err = fmt.Sscanf(line, "at Commit conn %d", &conn)
		require.NoError(t, err, line)
		var logs logged
		s := sweeping.New(store.Sweeping(), sweeping.Config{KeepHistory: true, PackBudget: time.Minute,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		done := make(chan error, 1)
		go func() {
			_, err := s.Maintain(ctx)
			done <- err
		}()
		// The other's compaction waits for the bucket the killed one holds.
		require.Eventually(t, func() bool {
			waits, err := mysqltest.StatementWaitsForALock(ctx, db, conn, "UPDATE task_buckets SET position = position WHERE")
			require.NoError(t, err)
			return waits
		}, 60*time.Second, 10*time.Millisecond, "the other maintainer waits for the held bucket")
		killAndAwait(ctx, t, killed, db, conn)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("the other maintainer is jammed")
		}
		require.Empty(t, logs.levels(t, "sweeper: compacting the reference directory failed; it is tried again later"))
		cells, logRows := directoryBytes(ctx, t, store)
		require.Zero(t, logRows, "the other's maintenance moved the whole log, the killed bucket's too")
		require.Equal(t, 24*2*len(refs), cells, "each entry once")
		for _, ref := range refs {
			require.Equal(t, before[ref], refIDs(ctx, t, store, ref), ref)
		}
	})
}

// Invariant: the counter service's sweep SIGKILLed after its publish returned and before it marked
// the notifications published loses none: they are all still unpublished in the table, and the
// next sweep, from another process, publishes each again (the repeat a consumer drops by its id)
// and marks it, after which no sweep publishes it. A sweep that marked before it published (the
// two swapped) loses every notification it was killed with: the test fails.
func TestACounterSweepKilledAfterItsPublishLosesNoNotification(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, dsn := testdb.DB(t, 8)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	results, err := store.Counters.ApplyCounterMessages(ctx, counterMessages(7))
	require.NoError(t, err)
	var want []string
	for _, r := range results {
		want = append(want, r.ID)
	}

	killed, line := startKilled(t, "counter-sweeper", "published ", "DB_DSN="+dsn)
	published := strings.Split(strings.TrimPrefix(line, "published "), ",")
	require.ElementsMatch(t, want, published, "the killed sweep published them all")
	killed.Kill()

	unpublished := func() (n int) {
		t.Helper()
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM counter_notifications WHERE state = 0").Scan(&n))
		return n
	}
	require.Equal(t, len(want), unpublished(), "none marked, none lost")
	pub := &recorder{}
	cfg := sweeping.Counters{Publisher: pub, RepublishAfter: -1, Batch: 3}
	res := sweeping.SweepCounters(ctx, store.Counters, cfg, nil)
	require.Zero(t, res.Errors)
	require.Equal(t, len(want), res.Republished)
	require.Len(t, pub.got, len(want))
	for _, id := range want {
		require.Contains(t, pub.got, id, "published again, by the same id")
	}
	require.Zero(t, unpublished())
	res = sweeping.SweepCounters(ctx, store.Counters, cfg, nil)
	require.Zero(t, res.Republished, "and then not again")
}

// refTask is a task of reference ref (i tells them apart).
func refTask(ref string, i int) exactlyonce.NewTask {
	return exactlyonce.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), ReferenceID: ref, MaxRetries: 3}
}
