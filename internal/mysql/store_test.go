package mysql_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

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
			storeOf := make([]*wire.Stores, tc.stores)
			for s := range storeOf {
				// BlockSize 16 makes blocks run out often, so reservations race too.
				store, err := wire.StoresOn(db, mysql.Config{Allocator: tc.allocator, BlockSize: 16})
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
						e, err = store.Events.CreateProcessed(ctx, "x")
						got = []int64{e.ID}
					case 1:
						var id int64
						id, err = store.Events.CreatePending(ctx)
						got = []int64{id}
					default: // several at once, as internal/api/group.go stores them; BlockSize 16 splits some across blocks
						got, err = store.Events.CreatePendingBatch(ctx, 2+(c+i)%9)
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
