package pagestore

// The reads of the packed history across its tiers (History): the page rows, then, for a page the
// move has passed, its object in the bucket. The move itself is archive.go.

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// History reads the packed history in both of its tiers: the page rows of event_pages, then the
// archive's objects (none when Archive is nil). Every read of a packed event goes through it, after
// the caller's own read of `events` (eventstore, taskstore): an event moves only downwards, from
// `events` to a page row (the pack) to the bucket (the move, which writes the object before it
// deletes the rows), so a read that misses it in one tier finds it in the next.
type History struct {
	Archive Archive
}

// Get returns id's packed row, if the history holds it: GetPacked's one column of its page's rows,
// else, if the move has ever passed the page, its page's object, one GET (none when the page is
// cached). It is the one read of a packed event by id, where the tiers are resolved. A page found
// in the cache without id is read once more from the bucket: a page moved again (a late event of
// it) has a newer object.
//
// A page the move never passed (page >= high_page: the window's, or past the id counter) has every
// event in the database: its object, if a move killed after its PUT left one, holds copies of its
// rows. So an id there that neither tier's rows hold is unknown, and the bucket is not asked: a
// 404 costs no GET, and is still a 404 while S3 is down. high_page is read after the rows, as in
// ReadColumns: the move deletes a page's rows and raises high_page past it in one transaction, so
// a read that missed the rows because they were just deleted finds high_page past the page.
//
// Without an archive (no HISTORY_BUCKET), an id of a page the move has passed is not known to be
// unknown: its event, if any, is in a bucket this process cannot read, and the read fails
// (noArchive) rather than answer that the event does not exist. Nor is it when the bucket has no
// object of the page (noObject): a page the move passed since migration 0037 has one (a marker if
// it had no events), so its object is missing. Nor, whatever it holds, is an object that names
// another archive than this database's (own): another database's object under this page's key.
func (h History) Get(ctx context.Context, q mysql.Conn, id int64) (pages.Row, bool, error) {
	r, ok, err := GetPacked(ctx, q, id)
	if err != nil || ok {
		return r, ok, err
	}
	st, err := readArchiveState(ctx, q)
	if err != nil {
		return pages.Row{}, false, err
	}
	if pages.PageOf(id) >= st.high {
		return pages.Row{}, false, nil
	}
	if h.Archive == nil {
		return pages.Row{}, false, noArchive(pages.PageOf(id), st.high)
	}
	for _, fresh := range []bool{false, true} {
		obj, found, err := h.Archive.GetObject(ctx, pages.PageOf(id), fresh)
		if err == nil && !found {
			err = h.noObject(ctx, pages.PageOf(id), st)
		}
		if err == nil && found {
			err = h.own(pages.PageOf(id), st.id, obj)
		}
		if err != nil || !found {
			return pages.Row{}, false, err
		}
		if r, ok, err := pages.FindInObject(obj.Bytes, id); err != nil || ok {
			return r, ok, err
		}
	}
	return pages.Row{}, false, nil
}

// noArchiveError is a read, by a process without an archive, of a page the move has passed: the
// page's events are in the bucket the sweeper moved them to, which this process does not read
// (HISTORY_BUCKET unset on it, `HISTORY_BUCKET= make run` on a database another run archived). It
// is the archive's unavailability (a 503 for the API, as an S3 failure is), never a 404: before, such
// a process answered 404 for every archived event and listed none of them, while GET /events
// counted them.
type noArchiveError struct{ page, high int64 }

func noArchive(page, high int64) error { return &noArchiveError{page, high} }

func (e *noArchiveError) Error() string {
	return fmt.Sprintf("page %d of the history was moved to the archive (history_archive.high_page is %d), and this process "+
		"has no archive: set HISTORY_BUCKET (and its endpoint) to the bucket the sweeper moves pages to", e.page, e.high)
}

func (e *noArchiveError) Unwrap() error {
	return exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the history's archive is unavailable; try again")
}

// archiveState is history_archive's row as a read sees it (ArchiveVersion), read after the page's
// rows and before the page's object.
type archiveState struct {
	high, archived         int64
	markedFrom, markedNext int64
	id                     string // the archive's identity (archive_id, migration 0038)
}

func readArchiveState(ctx context.Context, q mysql.Conn) (archiveState, error) {
	var st archiveState
	var id sql.NullString
	err := q.QueryRowContext(ctx, archiveQueries.ArchiveVersion).Scan(&st.high, &st.archived, &st.markedFrom, &st.markedNext, &id)
	st.id = id.String
	return st, err
}

// own is nil unless obj, page's object as read from the bucket (or the cache, which keeps the
// object's owner with it), names another archive than id, this database's (migration 0038): then
// it is another database's object under this page's key (a bucket shared by two databases), and a
// read answers the archive's unavailability (foreignObjectError: a 503 for the API, logged as an
// error naming the page, the bucket and both identities), never that database's events as this
// one's. An object that names none was written before 0038 (or by a seed), and is read as before.
func (h History) own(page int64, id string, obj archive.Object) error {
	if obj.Owner == "" || obj.Owner == id {
		return nil
	}
	return &foreignObjectError{page: page, bucket: h.Archive.Name(), mine: id, theirs: obj.Owner}
}

// foreignObjectError is an object of a page, in the bucket, that another database's archive wrote
// (its OwnerMeta is not this database's archive_id): a read of it is the archive's unavailability,
// never its events; the move stops at it (archive.go), as at a foreign object without identity
// (checkOwnObject).
type foreignObjectError struct {
	page         int64
	bucket       string
	mine, theirs string
}

func (e *foreignObjectError) Error() string {
	return fmt.Sprintf("archive: bucket %q's object of page %d (%s) was written by another database's archive (archive_id %s; "+
		"this database's is %s): the bucket is shared with another database (HISTORY_BUCKET set alike on two stacks, or "+
		"another DB_NAME with the same S3LOCAL_DIR); the page's events are not read from it, and the move stops there, "+
		"until HISTORY_BUCKET names this database's own bucket or the object is moved away", e.bucket, e.page, archive.Key(e.page), e.theirs, e.mine)
}

func (e *foreignObjectError) Unwrap() error {
	return exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the history's archive is unavailable; try again")
}

// marked says whether the bucket must hold page's object: the move wrote it (its events, or a
// marker) before it moved marked_next past the page (migration 0037), and st was read after that.
func (st archiveState) marked(page int64) bool {
	return page >= st.markedFrom && page < st.markedNext
}

// noObject is a read's check, when the bucket has no object of a page the move passed. A page the
// move passed since migration 0037 (marked) has an object, a marker if it had no events: one that
// is missing is a missing page (missingPage), never a page without events, and the bucket is not
// asked anything more. Below marked_from (an archive written before the migration), a page the
// move passed without events has none, but so has every page in a bucket that is not the one the
// sweeper moved the pages to: if the move has archived events (archived_events > 0), the bucket
// must hold page objects (bucketHoldsPages); a read that does not know that cannot answer that an
// event does not exist.
func (h History) noObject(ctx context.Context, page int64, st archiveState) error {
	if st.marked(page) {
		return &missingPageError{page: page, bucket: h.Archive.Name()}
	}
	if st.archived == 0 {
		return nil
	}
	return h.bucketHoldsPages(ctx, page)
}

// missingPageError is a read of a page the move passed and wrote an object of (its events, or a
// marker), which the bucket does not hold: deleted by hand, by a lifecycle rule, or the bucket is
// another database's. The page's events, if it had any, are not readable: the read is the
// archive's unavailability (a 503 for the API, logged as an error naming the page and the bucket,
// for a person to restore the object or point HISTORY_BUCKET at the right bucket), never a 404 or
// a listing without them.
type missingPageError struct {
	page   int64
	bucket string
}

func (e *missingPageError) Error() string {
	return fmt.Sprintf("page %d of the history was moved to the archive, and bucket %q has no object of it (%s): the object "+
		"was deleted, or this process reads another bucket than the one the sweeper moves pages to; restore the object "+
		"(an earlier version, where the bucket keeps them) or check HISTORY_BUCKET and AWS_ENDPOINT_URL_S3", e.page, e.bucket, archive.Key(e.page))
}

func (e *missingPageError) Unwrap() error {
	return exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the history's archive is unavailable; try again")
}

// bucketHoldsPages is nil if the bucket holds page objects, and an unavailable archive naming the
// bucket if it holds none although the move archived events: a 503, never a 404 for an event that
// is in another bucket (a second make run with its own S3LOCAL_DIR on a database another run
// archived; HISTORY_BUCKET naming another bucket).
func (h History) bucketHoldsPages(ctx context.Context, page int64) error {
	holds, err := h.Archive.HoldsPages(ctx)
	if err != nil || holds {
		return err
	}
	return &foreignBucketError{page: page, bucket: h.Archive.Name()}
}

// foreignBucketError is a read of a page the move passed, in a bucket that holds no page object at
// all although the move archived events: not the bucket the sweeper moved them to.
type foreignBucketError struct {
	page   int64
	bucket string
}

func (e *foreignBucketError) Error() string {
	return fmt.Sprintf("page %d of the history was moved to the archive, and bucket %q holds no page object: "+
		"this process reads another bucket than the one the sweeper moves pages to (check HISTORY_BUCKET and AWS_ENDPOINT_URL_S3)", e.page, e.bucket)
}

func (e *foreignBucketError) Unwrap() error {
	return exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the history's archive is unavailable; try again")
}

// Passed says whether the move has ever passed page (page < high_page), so that a read of it may
// need the page's object: a page it never passed has every event in the database. A reader that
// may stop before a page rather than read it (the processed listing, which needs no archived page
// to say that more events may follow) asks before it reads the page's rows; ReadColumns asks again
// after them, so that a move that passes the page in between is seen.
func (h History) Passed(ctx context.Context, q mysql.Conn, page int64) (bool, error) {
	high, err := h.HighPage(ctx, q)
	return page < high, err
}

// HighPage is the page the move has passed every page below (high_page; 0 without an archive): a
// reader that reads many events by id (a reference's listing) reads it once to tell which of them
// may need an archived page's object.
func (h History) HighPage(ctx context.Context, q mysql.Conn) (int64, error) {
	if h.Archive == nil {
		return 0, nil
	}
	var high int64
	err := q.QueryRowContext(ctx, archiveQueries.ArchiveHighPage).Scan(&high)
	return high, err
}

// ReadColumns returns the events of n columns of page from first, in both tiers (the package's
// ReadColumns, then, if the move has ever passed the page, the page's object read from the bucket,
// not the cache), each event once. A page the move never passed has all its events in its rows (a
// move killed after its PUT leaves them there too), so a listing of recent events makes no GET.
func (h History) ReadColumns(ctx context.Context, q mysql.Conn, page int64, first, n int) ([]pages.Row, error) {
	return h.ReadColumnsOnce(ctx, q, page, first, n, nil)
}

// PageObjects holds the archived pages' objects one reader (a request of the processed listing)
// has read, so that it reads each page's object once, not once per span of columns it walks
// (ReadColumnsOnce). Not safe for concurrent use; one per request.
type PageObjects struct {
	objs map[int64]pageObject
}

// Holds says whether objs holds page's object already (read by an earlier span): reading more of
// the page costs no GET, unless a move changed the archive since.
func (objs *PageObjects) Holds(page int64) bool {
	_, ok := objs.objs[page]
	return ok
}

// pageObject is a page's object and the archive's version (archived_events) read before it, with
// the rest of the archive's row as read then (whether the page must have an object).
type pageObject struct {
	obj     archive.Object
	ok      bool
	version int64
	st      archiveState
}

// ReadColumnsOnce is ReadColumns reading each page's object at most once for objs (nil: every
// time), as long as no move has deleted page rows since it read it. The rows of the span are read
// first, then the archive's row (high_page and archived_events, which every move that deletes
// rows raises, by their events, at least one), then the object if the one held was read under
// another archived_events: an event that is in neither the rows read nor the object held was
// deleted from the rows after that object was read, so archived_events has changed since, and the
// object is read again (it holds the event: the move writes it before it deletes the rows).
func (h History) ReadColumnsOnce(ctx context.Context, q mysql.Conn, page int64, first, n int, objs *PageObjects) ([]pages.Row, error) {
	rows, err := ReadColumns(ctx, q, page, first, n)
	if err != nil {
		return rows, err
	}
	st, err := readArchiveState(ctx, q)
	if err != nil {
		return nil, err
	}
	high, version := st.high, st.archived
	if page >= high {
		return rows, nil
	}
	if h.Archive == nil {
		return nil, noArchive(page, high)
	}
	held, have := pageObject{}, false
	if objs != nil {
		held, have = objs.objs[page]
	}
	if !have || held.version != version {
		obj, ok, err := h.Archive.GetObject(ctx, page, true)
		if err != nil {
			return nil, err
		}
		held = pageObject{obj: obj, ok: ok, version: version, st: st}
		if objs != nil {
			if objs.objs == nil {
				objs.objs = map[int64]pageObject{}
			}
			objs.objs[page] = held
		}
	}
	obj, ok := held.obj, held.ok
	if !ok {
		if err := h.noObject(ctx, page, held.st); err != nil {
			return nil, err
		}
	}
	if !ok {
		return rows, nil
	}
	if err := h.own(page, held.st.id, obj); err != nil {
		return nil, err
	}
	cols, err := pages.ObjectColumns(obj.Bytes, page)
	if err != nil {
		return nil, err
	}
	seen := make(map[int64]bool, len(rows))
	for _, r := range rows {
		seen[r.ID] = true
	}
	for c := first; c < first+n && c < pages.Columns; c++ {
		archived, err := pages.Decode(cols[c])
		if err != nil {
			return nil, err
		}
		for _, r := range archived {
			if !seen[r.ID] {
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}
