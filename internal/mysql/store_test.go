package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

func fixedValue(id int64) string { return fmt.Sprintf("v%d", id) }

func TestSchemaRulesHoldAfterMigration(t *testing.T) {
	t.Parallel()
	db, _ := testdb.DB(t, 2)
	ctx := context.Background()

	violations, err := mysql.CheckRules(ctx, db)
	require.NoError(t, err)
	require.Empty(t, violations)

	// The check itself must be able to fail: break each rule once and see it reported.
	for _, stmt := range []string{
		"CREATE TABLE scratch_pk (id INT NOT NULL PRIMARY KEY)",
		"CREATE TABLE scratch_idx (id INT NOT NULL, KEY by_id (id))",
		"CREATE TABLE scratch_ai (id INT NOT NULL AUTO_INCREMENT, KEY (id))",
		"CREATE TRIGGER scratch_trg BEFORE INSERT ON status FOR EACH ROW SET NEW.id = NEW.id",
		"CREATE PROCEDURE scratch_proc() SELECT 1",
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	violations, err = mysql.CheckRules(ctx, db)
	require.NoError(t, err)
	joined := fmt.Sprint(violations)
	for _, want := range []string{"scratch_pk.PRIMARY", "scratch_idx.by_id", "auto-increment scratch_ai.id", "trigger scratch_trg", "PROCEDURE scratch_proc"} {
		require.Contains(t, joined, want)
	}
}

// The rules forbid more than keys: no procedures, triggers "etc.", so nothing that runs or stores
// logic in the database besides the tables. A view, a scheduled event, a stored function and (on
// MariaDB) a sequence, which is an auto-increment by another name, are each refused by the check that
// runs after every migration: a database holding them fails to migrate, and the error names each.
func TestSchemaRulesRefuseViewsEventsFunctionsAndSequences(t *testing.T) {
	t.Parallel()
	dsn := testdb.NewDatabase(t)
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()

	forbidden := []struct{ create, reported string }{
		{"CREATE VIEW scratch_view AS SELECT 1 AS one", "view scratch_view"},
		// DISABLE: the event must never run; the rule is about its existence.
		{"CREATE EVENT scratch_event ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1", "scheduled event scratch_event"},
		{"CREATE FUNCTION scratch_fn() RETURNS INT DETERMINISTIC RETURN 1", "stored routine FUNCTION scratch_fn"},
	}
	var version string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version))
	if strings.Contains(version, "MariaDB") { // MySQL (Aurora) has no sequences
		forbidden = append(forbidden, struct{ create, reported string }{
			"CREATE SEQUENCE scratch_seq", "sequence scratch_seq"})
	}
	for _, f := range forbidden {
		_, err := db.ExecContext(ctx, f.create)
		require.NoError(t, err, f.create)
	}

	err = mysql.Migrate(ctx, db)
	require.Error(t, err, "a migration must refuse a database that breaks the rules")
	for _, f := range forbidden {
		require.Contains(t, err.Error(), f.reported)
	}

	// Each object on its own: drop them one by one, and the check reports exactly the ones left.
	for i, f := range forbidden {
		violations, err := mysql.CheckRules(ctx, db)
		require.NoError(t, err)
		var want []string
		for _, left := range forbidden[i:] {
			want = append(want, left.reported)
		}
		require.ElementsMatch(t, want, violations)
		name := f.reported[strings.LastIndex(f.reported, " ")+1:]
		kind := strings.Fields(f.create)[1]
		_, err = db.ExecContext(ctx, "DROP "+kind+" "+name)
		require.NoError(t, err)
	}
	violations, err := mysql.CheckRules(ctx, db)
	require.NoError(t, err)
	require.Empty(t, violations)
	require.NoError(t, mysql.Migrate(ctx, db), "the same database, rid of them, migrates")
}

func TestMigrateConcurrentlyOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	dsn := testdb.NewDatabase(t)
	ctx := context.Background()

	// Ten "cold starts" at once, each with its own pool, as ten Lambda environments would.
	const processes = 10
	var wg sync.WaitGroup
	errs := make(chan error, processes)
	start := make(chan struct{})
	for range processes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 2})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			<-start
			errs <- mysql.Migrate(ctx, db)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn})
	require.NoError(t, err)
	defer db.Close()
	var statusRows, versions, distinctVersions int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM status").Scan(&statusRows))
	require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations").Scan(&versions, &distinctVersions))
	require.Equal(t, 1, statusRows, "the counter must have exactly one row")
	files, err := os.ReadDir("migrations")
	require.NoError(t, err)
	require.Equal(t, len(files), versions, "every migration recorded (versions may skip a number)")
	require.Equal(t, versions, distinctVersions, "each migration recorded once")

	// Migrating again is a no-op.
	require.NoError(t, mysql.Migrate(ctx, db))
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM status").Scan(&statusRows))
	require.Equal(t, 1, statusRows)
}

func TestAllocatorsGiveUniqueIDsUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		allocator string
		stores    int // processes sharing the database, each with its own allocator
		perStore  int // concurrent clients per process
		each      int // events each client creates
	}{
		{mysql.AllocatorLiteral, 1, 64, 8},
		{mysql.AllocatorBlock, 1, 64, 40},
		{mysql.AllocatorBlock, 8, 8, 40}, // blocks reserved by several processes interleave
	} {
		t.Run(fmt.Sprintf("%s/%dx%d", tc.allocator, tc.stores, tc.perStore), func(t *testing.T) {
			t.Parallel()
			db, _ := testdb.DB(t, 70)
			ctx := context.Background()
			var (
				mu  sync.Mutex
				ids = map[int64]int{}
			)
			storeOf := make([]*mysql.Store, tc.stores)
			for s := range storeOf {
				// BlockSize 16 makes blocks run out often, so reservations race too.
				store, err := mysql.NewStore(db, mysql.StoreConfig{Allocator: tc.allocator, BlockSize: 16})
				require.NoError(t, err)
				storeOf[s] = store
			}
			together(t, tc.stores*tc.perStore, func(w int) error {
				store, c := storeOf[w/tc.perStore], w%tc.perStore
				for i := range tc.each {
					var got []int64
					var err error
					switch (c + i) % 3 {
					case 0:
						var e exactlyonce.Event
						e, err = store.CreateProcessed(ctx, "x")
						got = []int64{e.ID}
					case 1:
						var id int64
						id, err = store.CreatePending(ctx)
						got = []int64{id}
					default: // several at once, as internal/api/group.go stores them; BlockSize 16 splits some across blocks
						got, err = store.CreatePendingBatch(ctx, 2+(c+i)%9)
					}
					if err != nil {
						return err
					}
					mu.Lock()
					for _, id := range got {
						ids[id]++
					}
					mu.Unlock()
				}
				return nil
			})
			total := len(ids)
			require.Greater(t, total, tc.stores*tc.perStore*tc.each, "the batches added events")
			for id, n := range ids {
				require.Equal(t, 1, n, "id %d handed out %d times", id, n)
				require.Positive(t, id)
			}
			var rows, distinct int
			require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT id) FROM events").Scan(&rows, &distinct))
			require.Equal(t, total, rows, "every id handed out was stored once")
			require.Equal(t, total, distinct, "no id stored twice")
		})
	}
}

func TestGetAndCount(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()

	created, err := store.CreateProcessed(ctx, "hello")
	require.NoError(t, err)
	pendingID, err := store.CreatePending(ctx)
	require.NoError(t, err)

	got, err := store.Get(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, "hello", *got.Value)
	require.Equal(t, exactlyonce.Processed, got.State)
	require.Equal(t, exactlyonce.ByAPI, got.ProcessedBy)
	require.Equal(t, 1, got.ProcessCount)
	require.NotNil(t, got.ProcessedAt)
	require.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)

	pending, err := store.Get(ctx, pendingID)
	require.NoError(t, err)
	require.Nil(t, pending.Value)
	require.Equal(t, exactlyonce.Pending, pending.State)
	require.Nil(t, pending.ProcessedAt)

	_, err = store.Get(ctx, 1<<40)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err))

	n, err := store.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

func TestProcessIDsOutcomes(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()

	fresh, err := store.CreatePending(ctx)
	require.NoError(t, err)
	held, err := store.CreatePending(ctx)
	require.NoError(t, err)
	done, err := store.CreateProcessed(ctx, "before")
	require.NoError(t, err)

	// Another worker holds `held`.
	tx, err := store.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	var got int64
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT id FROM events WHERE id = ? FOR UPDATE", held).Scan(&got))

	ctxTimeout, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := processIDs(ctxTimeout, store, false, fresh, fresh, held, done.ID, 999999)
	require.NoError(t, err)
	require.Equal(t, map[int64]exactlyonce.Outcome{
		fresh:   exactlyonce.OutcomeSettled,
		held:    exactlyonce.OutcomeBusy,
		done.ID: exactlyonce.OutcomeAlreadySettled,
		999999:  exactlyonce.OutcomeMissing,
	}, out)

	e, err := store.Get(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, fixedValue(fresh), *e.Value)
	require.Equal(t, exactlyonce.ByProcessor, e.ProcessedBy)
	require.Equal(t, 1, e.ProcessCount)
	e, err = store.Get(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, "before", *e.Value, "an already processed event is not written again")
	require.Equal(t, 1, e.ProcessCount)

	// Once the holder lets go, the held event can be processed, exactly once.
	require.NoError(t, tx.Rollback())
	out, err = processIDs(ctx, store, false, held, fresh)
	require.NoError(t, err)
	require.Equal(t, map[int64]exactlyonce.Outcome{held: exactlyonce.OutcomeSettled, fresh: exactlyonce.OutcomeAlreadySettled}, out)
}

// The server runs at its default REPEATABLE READ. A sweep must not wait for a row another worker
// holds: that only holds if the store runs its transactions at READ COMMITTED.
func TestSweepDoesNotWaitForRowsOthersHold(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()
	var isolation string
	require.NoError(t, store.DB().QueryRow("SELECT @@GLOBAL.tx_isolation").Scan(&isolation))
	t.Logf("server default isolation: %s", isolation)

	var ids []int64
	for range 20 {
		id, err := store.CreatePending(ctx)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	tx, err := store.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	var held int64
	require.NoError(t, tx.QueryRowContext(ctx,
		"SELECT id FROM events WHERE state = 0 AND id = ? FOR UPDATE", ids[7]).Scan(&held))

	// innodb_lock_wait_timeout is 50 s by default: waiting would blow this deadline.
	ctxTimeout, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := processDue(ctxTimeout, store, false, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 19, n, "every pending event but the held one")
}

func TestProcessDueLeavesYoungEventsToTheQueue(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()
	_, err := store.CreatePending(ctx)
	require.NoError(t, err)
	n, err := processDue(ctx, store, false, time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = processDue(ctx, store, false, 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// Sweepers and processors racing over the same pending events, through separate stores as separate
// processes would: every event ends processed, and processed once.
//
// Both processing paths race: the one-transaction path (inline work) and the lease path (claim and
// commit, work outside any transaction, settle under the lease's guard), and both together, half
// the workers taking each path over the same events.
func TestConcurrentWorkersProcessEachEventOnce(t *testing.T) {
	t.Parallel()
	for name, leased := range map[string]func(w int) bool{
		"inline": func(int) bool { return false },
		"leased": func(int) bool { return true },
		"mixed":  func(w int) bool { return w%4 >= 2 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raceWorkers(t, leased)
		})
	}
}

func raceWorkers(t *testing.T, leased func(w int) bool) {
	db, _ := testdb.DB(t, 40)
	ctx := context.Background()
	setup, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	const total = 600
	var ids []int64
	for range total {
		id, err := setup.CreatePending(ctx)
		require.NoError(t, err)
		ids = append(ids, id)
	}

	var (
		mu        sync.Mutex
		processed = map[int64]int{}
		deadlocks int64
	)
	storeOf := make([]*mysql.Store, 8)
	for w := range storeOf {
		store, err := mysql.NewStore(db, mysql.StoreConfig{})
		require.NoError(t, err)
		storeOf[w] = store
	}
	together(t, len(storeOf), func(w int) error { // 4 sweepers and 4 processors
		store := storeOf[w]
		defer func() { mu.Lock(); deadlocks += store.Stats().Deadlocks; mu.Unlock() }()
		if w%2 == 0 { // a sweeper drains in batches of 25
			for {
				n, err := processDue(ctx, store, leased(w), 0, 25)
				if err != nil || n == 0 {
					return err
				}
			}
		}
		// a processor handles "messages" for every id, in batches of 10, in its own order
		for i := w * 10 % total; i < total+w*10%total; i += 10 {
			batch := make([]int64, 0, 10)
			for j := i; j < i+10; j++ {
				batch = append(batch, ids[j%total])
			}
			out, err := processIDs(ctx, store, leased(w), batch...)
			if err != nil {
				return err
			}
			mu.Lock()
			for id, o := range out {
				if o == exactlyonce.OutcomeSettled {
					processed[id]++
				}
			}
			mu.Unlock()
		}
		return nil
	})
	for id, n := range processed {
		require.Equal(t, 1, n, "event %d reported processed by %d processor calls", id, n)
	}
	var pending, wrong int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM events WHERE state < 10").Scan(&pending))
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM events WHERE process_count <> 1").Scan(&wrong))
	require.Zero(t, pending)
	require.Zero(t, wrong, "every event written exactly once")
	t.Logf("deadlocks retried: %d", deadlocks)
}
