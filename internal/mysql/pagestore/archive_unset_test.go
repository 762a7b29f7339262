package pagestore_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A process without the archive (HISTORY_BUCKET unset on it: `HISTORY_BUCKET= make run`, or a
// second make run on the same database whose S3 is another) reads a database whose pages were
// moved to the bucket. Its reads of an archived event, of the processed listing and of a
// reference's tasks fail as an unavailable archive does, naming HISTORY_BUCKET. Before, the event
// did not exist (a 404), a task had no attempts, the listing left every archived event out, and the
// reference's listing failed as an internal error ("the directory of reference names task N, which
// is not stored"), while GET /events counted them all. A page the move never passed reads as before.
func TestAProcessWithoutTheArchiveDoesNotReadArchivedEventsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	tasks, _ := history(t, h.store, 300)
	packAll(t, h.store)
	plain := int64(0)
	for id := int64(1); plain == 0; id++ {
		e, err := h.store.Events.Get(ctx, id)
		if err == nil && e.Task == nil {
			plain = id
		}
	}
	require.Positive(t, moveAll(t, ctx, h.store, 0).Pages)

	bare, err := wire.StoresOn(h.db, mysql.Config{}) // the same database, no archive
	require.NoError(t, err)
	unavailable := func(err error, what string) {
		t.Helper()
		require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%s: %v", what, err)
		require.ErrorContains(t, err, "HISTORY_BUCKET", what)
	}
	_, err = bare.Events.Get(ctx, plain)
	unavailable(err, "an archived plain event by id")
	_, err = bare.Events.Get(ctx, tasks[1])
	unavailable(err, "an archived task by id")
	_, err = bare.Tasks.Attempts(ctx, tasks[1])
	unavailable(err, "an archived task's attempts")
	err = func() error { // the listing followed down to the archived page, as listAll does
		before := int64(0)
		for range 1000 {
			got, resume, err := bare.Events.ListEvents(ctx, "processed", "", before, 100)
			switch {
			case err != nil:
				return err
			case len(got) == 100:
				before = got[len(got)-1].ID
			case resume > 0:
				before = resume
			default:
				return nil
			}
		}
		return nil
	}()
	unavailable(err, "the processed listing")
	_, err = bare.Tasks.ReferenceTasks(ctx, "ref-1", 0, 100)
	unavailable(err, "a reference's archived tasks")

	// The archive's own reads are unchanged, and a page the move never passed needs no archive.
	e, err := h.store.Events.Get(ctx, plain)
	require.NoError(t, err)
	require.Equal(t, plain, e.ID)
	var counter int64
	require.NoError(t, h.db.QueryRow("SELECT id FROM status").Scan(&counter))
	_, err = bare.Events.Get(ctx, counter+1)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id past the id counter: %v", err)
}
