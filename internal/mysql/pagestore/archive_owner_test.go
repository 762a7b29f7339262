package pagestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two databases moving their pages to one bucket: HISTORY_BUCKET shared by mistake, `make run`
// under another DB_NAME with the default S3LOCAL_DIR, or a database restored from a backup that the
// bucket has outgrown. Both name page 0's object pages/0. The second database's move found the
// first's object and merged it with its own rows, as it merges the object a move of its own left
// (killed after its PUT): the second database then listed and read the first's events whose ids it
// never had (4 phantom events of another database in GET /events?state=processed, beside a count
// that did not hold them, by hand with make run, 2026-11-28), and the first's archived events whose
// ids it had were replaced by its own (silently, when the first had no id the second lacked). A
// page the move never passed (high_page) has every event of an object of its own in its rows, as
// the object holds it (rows only grow until the move deletes them, raising high_page in the same
// transaction), so an object of it holding an event the rows do not, or holding it otherwise, is
// another database's: the move now leaves the page, and the object, as they are and says why.
func TestAMoveLeavesAnotherDatabasesObjectAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		first, second int
	}{{"the other has ids this one lacks", 600, 300}, {"the other's ids are all this one's", 300, 600}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			first := newArchived(t)
			createProcessed(t, first.store, c.first)
			foldAll(t, first.store)
			packAll(t, first.store)
			require.EqualValues(t, 1, moveAll(t, ctx, first.store, 0).Pages)
			fresh := func(db *sql.DB) *wire.Stores { // stores whose archive has nothing cached
				t.Helper()
				s, err := wire.StoresOn(db, mysql.Config{})
				require.NoError(t, err)
				s.WithArchive(archive.New(locals3.Client(t), first.bucket, 0))
				return s
			}
			firstBefore := readAll(t, fresh(first.db), 1200, nil)
			require.Len(t, firstBefore.events, c.first)

			db, _ := testdb.DB(t, 8)
			second := fresh(db)
			createProcessed(t, second, c.second)
			foldAll(t, second)
			packAll(t, second)
			secondBefore := readAll(t, second, 1200, nil)
			require.Len(t, secondBefore.events, c.second)

			_, moveErr := second.Pages.ArchivePages(ctx, 0, time.Minute)
			assert.Empty(t, differ(secondBefore, readAll(t, fresh(db), 1200, nil)), "the second database reads as before: none of the first's events")
			assert.Empty(t, differ(firstBefore, readAll(t, fresh(first.db), 1200, nil)), "the first database's archive is as it was")
			require.ErrorContains(t, moveErr, "another database", "the move says why it leaves the page")
			require.Positive(t, pageRows(t, db, 0), "the page stays in the second database")
			audit, err := mysqltest.AuditEvents(ctx, db)
			require.NoError(t, err)
			require.Len(t, audit, c.second)
		})
	}
}

// differ says briefly how two readings of a history differ ("" when they do not).
func differ(was, is readers) string {
	var ids []int64
	for id, e := range was.events {
		if f, ok := is.events[id]; !ok || !reflect.DeepEqual(e, f) {
			ids = append(ids, id)
		}
	}
	for id := range is.events {
		if _, ok := was.events[id]; !ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 && slices.Equal(was.listed, is.listed) && was.count == is.count {
		return ""
	}
	slices.Sort(ids)
	return fmt.Sprintf("%d ids read otherwise (%v ...), %d listed then %d, count %d then %d",
		len(ids), ids[:min(5, len(ids))], len(was.listed), len(is.listed), was.count, is.count)
}
