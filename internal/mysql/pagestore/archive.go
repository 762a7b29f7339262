package pagestore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// The archive: pages of the packed history older than the retention window move from
// event_pages to one S3 object a page (internal/archive, internal/pages' object format), and every
// read of a packed event looks in the page rows first and in the bucket second (History). The move
// (ArchivePages) writes a page's object, reads it back, and only then deletes the page's rows, so
// a page is in the database, in the bucket, or in both while it moves, never in neither; and it
// deletes them only if they are still what it wrote (a pack may merge a late unit into them
// meanwhile), so nothing is lost to a race either. A page it passes without rows gets a marker, an
// object of no events (unless the bucket holds an object of it already), before the move's place
// moves past it: so every page it has passed since migration 0037 has an object, and a read that
// misses one knows the page is missing rather than without events (archive_read.go). See
// archive.sql, migrations/0017_history_archive.sql and migrations/0037_history_archive_marked.sql.

type archiveTexts struct {
	ArchiveCursor, ArchiveHighPage, ArchiveVersion, PageSize, PageRows, LockPageRows, DeletePage, AdvanceArchive, LowerArchiveCursor string
}

// Archive is the bucket of archived pages (internal/archive's Bucket).
type Archive interface {
	// GetObject returns page's object with its owner (the archive that wrote it, "" for none); ok
	// is false when there is none. fresh skips any cache.
	GetObject(ctx context.Context, page int64, fresh bool) (obj archive.Object, ok bool, err error)
	// ReadObject returns page's object as the bucket holds it now, with its owner, and its
	// version; ok is false when there is none.
	ReadObject(ctx context.Context, page int64) (obj archive.Object, version string, ok bool, err error)
	// PutObject writes page's object, with its owner, only if the bucket still holds the version
	// read ("": none), else an error wrapping ErrPageChanged (internal/archive's).
	PutObject(ctx context.Context, page int64, obj archive.Object, version string) error
	// Changed says whether err is PutPage's for a page whose object changed since it was read.
	Changed(err error) bool
	// HoldsPages says whether the bucket holds any page object at all.
	HoldsPages(ctx context.Context) (bool, error)
	// Name is the bucket's name.
	Name() string
}

// WithArchive returns a Store like s whose pages older than the retention window move to a (nil:
// none, and ArchivePages does nothing).
func (s *Store) WithArchive(a Archive) *Store {
	c := *s
	c.archive = a
	return &c
}

// History returns the reader of the packed history across its tiers, with s's archive.
func (s *Store) History() History { return History{Archive: s.archive} }

const (
	// archiveMaxPageBytes is the most bytes of columns a page may have to be moved: the move holds
	// a page's rows, its old object, the merged columns, the new object and the object read back,
	// about five times this at worst, inside a sweeper's 256 MB. A larger page (ten thousand large
	// tasks) stays in the database, where every read finds it.
	archiveMaxPageBytes = 32 << 20
	// archiveRoundBytes is the most bytes of pages one ArchivePages moves (besides its time budget):
	// what one maintenance sends to S3.
	archiveRoundBytes = 128 << 20
	// archiveLagPages is how many pages below the id counter's page the move stops, whatever their
	// age: the pack's own lag, and the page it fills.
	archiveLagPages = 1
)

// ArchiveResult is what one ArchivePages did.
type ArchiveResult = exactlyonce.ArchiveResult

// archiveStepKey is the context key of WithArchiveSteps' function.
type archiveStepKey struct{}

// WithArchiveSteps returns ctx carrying f: a move run under it (ArchivePages) calls f with the
// page before each of its steps: "Read" (the page's rows), "Put" (the object), "Verify" (reading
// it back), "Delete" (the transaction that deletes the rows), "Commit"; for a page without rows,
// "Mark" (the marker's PUT) and "Pass" (inside the transaction that moves the move's place past
// the page, before its commit). Only tests set one: they hold a move between its steps, or kill
// the process that runs it there.
func WithArchiveSteps(ctx context.Context, f func(page int64, step string)) context.Context {
	return context.WithValue(ctx, archiveStepKey{}, f)
}

func archiveStep(ctx context.Context, page int64, step string) {
	if f, ok := ctx.Value(archiveStepKey{}).(func(int64, string)); ok {
		f(page, step)
	}
}

var errArchiveRace = errors.New("archive: the page's rows changed while it moved")

// ArchivePages moves pages whose newest event is older than retention from event_pages to the
// archive, from where the last move stopped (history_archive's next_page) upwards, until a page is
// too young, a page of the id counter's, more than archiveRoundBytes were moved, or budget has
// passed (it always moves one page, if one is due, or passes one page it calls S3 for: a page at
// or past marked_next, which gets its marker or is found to have an object). Safe to run from many processes at once, and to
// kill at any step: a page's rows are deleted only after its object holds them, and only if they
// are still the rows it wrote (under the packs' turn); a move killed after its PUT leaves the page
// in both tiers, which the next move writes again, merged, each event once.
func (s *Store) ArchivePages(ctx context.Context, retention, budget time.Duration) (ArchiveResult, error) {
	var res ArchiveResult
	if s.archive == nil {
		return res, nil
	}
	stop := time.Now().Add(budget)
	cutoff := time.Now().Add(-retention)
	var next, pagesHeld, eventsHeld, marked int64
	var id sql.NullString // the archive's identity, written on every object (migration 0038)
	if err := s.db.QueryRowContext(ctx, archiveQueries.ArchiveCursor).Scan(&next, &pagesHeld, &eventsHeld, &marked, &id); err != nil {
		return res, mysql.Interpret("archive pages", fmt.Errorf("history_archive (migrations 0017, 0037, 0038): %w", err))
	}
	// Pages from marked on may have been passed without a marker (by a move of the code before
	// migration 0037, during its deploy): the move passes them again, and writes the markers.
	next = min(next, marked)
	counter, err := s.core.ReadIDCounter(ctx)
	if err != nil {
		return res, mysql.Interpret("archive pages", err)
	}
	last := pages.PageOf(counter) - archiveLagPages // pages from here on are not moved
	for page := next; page < last && ctx.Err() == nil; page++ {
		// page > marked: this move has passed a page it called S3 for (the walk is contiguous from
		// next <= marked), whether it wrote a marker or found an object there.
		spent := res.Pages+res.Skipped+res.Markers > 0 || page > marked
		if spent && (!time.Now().Before(stop) || res.Bytes >= archiveRoundBytes) {
			break
		}
		more, err := s.archivePage(ctx, page, id.String, cutoff, page >= marked, &res)
		if errors.Is(err, errPackBusy) || errors.Is(err, errArchiveRace) {
			return res, nil // a pack holds the turn, or wrote the page: the next maintenance moves it
		}
		if err != nil {
			return res, mysql.Interpret("archive pages", err)
		}
		if !more {
			break
		}
	}
	return res, nil
}

// archivePage moves page if it is due. more is false when the walk should stop here (the page is
// too young). unmarked says the page may have no object yet (it is not below marked_next, as read
// when the move began): a page passed without rows gets its marker. id is the archive's identity,
// which every object it writes carries (migration 0038).
func (s *Store) archivePage(ctx context.Context, page int64, id string, cutoff time.Time, unmarked bool, res *ArchiveResult) (more bool, err error) {
	var rowCount, size int64
	if err := s.db.QueryRowContext(ctx, archiveQueries.PageSize, page).Scan(&rowCount, &size); err != nil {
		return false, err
	}
	if size > cmp.Or(s.maxPageBytes, archiveMaxPageBytes) {
		res.Skipped++
		if unmarked { // its events stay in its rows, where every read looks first
			if err := s.mark(ctx, page, id, res); err != nil {
				return false, err
			}
		}
		return true, s.passLarge(ctx, page)
	}
	var rows [][pages.Columns][]byte
	if rowCount > 0 {
		archiveStep(ctx, page, "Read")
		if rows, err = readPageRows(ctx, s.db, archiveQueries.PageRows, page); err != nil {
			return false, err
		}
		young, err := newerThan(rows, cutoff)
		if err != nil || young {
			return false, err
		}
	}
	if len(rows) == 0 {
		// No row: moved already, or never any (a gap of ids), or not packed yet, in which case the
		// pack lowers next_page when it writes the page. Its marker first, then past it, under the
		// turn.
		if unmarked {
			if err := s.mark(ctx, page, id, res); err != nil {
				return false, err
			}
		}
		return true, s.advance(ctx, page, false, 0, nil)
	}
	// The page's object: what the bucket holds of it already (a late event's page, or a move killed
	// after its PUT) merged with its rows, the rows' copy of an event winning, each event once.
	old, version, hadObject, err := s.archive.ReadObject(ctx, page)
	if err != nil {
		return false, err
	}
	var oldCols [pages.Columns][]byte
	created := !hadObject // the page's first object of events: none before, or a marker
	if hadObject {
		if oldCols, err = pages.ObjectColumns(old.Bytes, page); err != nil {
			return false, err
		}
		if err := s.checkOwner(ctx, page, id, old, &oldCols); err != nil {
			return false, err
		}
		if created, err = isMarker(&oldCols); err != nil {
			return false, err
		}
	}
	var merged [pages.Columns][]byte
	var events int64
	for c := range merged {
		parts := [][]byte{oldCols[c]}
		for _, r := range rows {
			parts = append(parts, r[c])
			n, err := pages.Count(r[c])
			if err != nil {
				return false, err
			}
			events += int64(n)
		}
		if merged[c], err = pages.MergeColumns(parts...); err != nil {
			return false, err
		}
	}
	obj := pages.EncodeObject(page, &merged)
	archiveStep(ctx, page, "Put")
	if err := s.archive.PutObject(ctx, page, archive.Object{Bytes: obj, Owner: id}, version); s.archive.Changed(err) {
		// Another move wrote the page since this one read it: it left the page as it found it; the
		// next move reads the page again.
		return false, errArchiveRace
	} else if err != nil {
		return false, err
	}
	archiveStep(ctx, page, "Verify")
	back, _, ok, err := s.archive.ReadObject(ctx, page)
	if err != nil {
		return false, err
	}
	if !ok || !bytes.Equal(back.Bytes, obj) || back.Owner != id {
		// Not what it wrote: another move wrote the page since (each write is conditional on the
		// version its writer read, so that one holds whatever this one held, and more). The rows
		// stay; the next move reads the page again.
		return false, errArchiveRace
	}
	archiveStep(ctx, page, "Delete")
	if err := s.advance(ctx, page, created, events, rows); err != nil {
		return false, err
	}
	res.Pages++
	res.Events += events
	res.Bytes += int64(len(obj))
	return true, nil
}

// mark writes page's marker, an object of no events, for a page the move passes without rows,
// unless the bucket holds an object of the page already (the PUT is conditional on there being
// none: an object of events, a marker of an earlier move, one a killed move left, are kept as they
// are). The move writes it before it moves its place past the page, so that a page it has passed
// has an object, and a read that misses one reads the page as missing (History.Get). The marker
// carries the archive's identity, id. An object found there is checked as the move checks one it
// would merge (checkOwner): another database's (another identity, or, without one, events this
// database never had) stops the move at the page, which is not passed as marked.
func (s *Store) mark(ctx context.Context, page int64, id string, res *ArchiveResult) error {
	obj := pages.EncodeObject(page, &[pages.Columns][]byte{})
	archiveStep(ctx, page, "Mark")
	err := s.archive.PutObject(ctx, page, archive.Object{Bytes: obj, Owner: id}, "")
	if s.archive.Changed(err) { // an object of the page is there already: whose?
		found, _, ok, err := s.archive.ReadObject(ctx, page)
		if err != nil || !ok {
			if err == nil {
				err = errArchiveRace // gone since (deleted by hand): the next move marks the page
			}
			return err
		}
		cols, err := pages.ObjectColumns(found.Bytes, page)
		if err != nil {
			return err
		}
		return s.checkOwner(ctx, page, id, found, &cols)
	}
	if err != nil {
		return err
	}
	res.Markers++
	res.Bytes += int64(len(obj))
	return nil
}

// checkOwner fails when obj, page's object found in the bucket by a move (cols, its columns), is
// not this database's: it names another archive than id (migration 0038: foreignObjectError, naming
// the bucket and both identities), or, written without an identity (before 0038), it fails
// checkOwnObject. An object naming id is this database's own.
func (s *Store) checkOwner(ctx context.Context, page int64, id string, obj archive.Object, cols *[pages.Columns][]byte) error {
	if obj.Owner != "" {
		if obj.Owner != id {
			return &foreignObjectError{page: page, bucket: s.archive.Name(), mine: id, theirs: obj.Owner}
		}
		return nil
	}
	return s.checkOwnObject(ctx, page, cols)
}

// isMarker says whether cols, an object's columns, hold no event: a marker.
func isMarker(cols *[pages.Columns][]byte) (bool, error) {
	for _, c := range cols {
		if n, err := pages.Count(c); err != nil || n > 0 {
			return false, err
		}
	}
	return true, nil
}

// checkOwnObject fails when page's object, found in the bucket by a move, is not this database's:
// the bucket shared with another database (HISTORY_BUCKET set alike on two stacks, `make run` under
// another DB_NAME with the same S3LOCAL_DIR), or this database restored from a backup older than
// the bucket. The move would merge such an object with its rows, as it merges its own: this
// database would then read and list the other's events whose ids it never had, and the other's
// events whose ids it has would be replaced in the object by its own. An object of a page this
// database's move has passed (page < high_page) is its own. One of a page it never passed can only
// be its own if a move of it was killed after its PUT, or a marker (no event) of a page a move
// passed without rows, and then every event of the object is in the page's rows as the object
// holds it: the rows only gain events (a settled event's record does not
// change) until a move deletes them, which raises high_page in the same transaction. So the rows
// are read again after the object, and high_page after them: an event of the object that the rows
// lack or hold otherwise makes it another database's, and the page stays in the database, with the
// error logged by every maintenance, until an operator moves the bucket's object away (or points
// HISTORY_BUCKET at this database's own bucket). It reads the rows again and decodes them and the
// object, one column at a time, only for an object of a page the move never passed, which only a
// killed move leaves; for a late event's page it reads high_page alone.
func (s *Store) checkOwnObject(ctx context.Context, page int64, obj *[pages.Columns][]byte) error {
	passed := func() (bool, error) { // high_page only grows
		var high int64
		err := s.db.QueryRowContext(ctx, archiveQueries.ArchiveHighPage).Scan(&high)
		return page < high, err
	}
	if ok, err := passed(); ok || err != nil {
		return err // a late event's page: no second read of its rows
	}
	rows, err := readPageRows(ctx, s.db, archiveQueries.PageRows, page)
	if err != nil {
		return err
	}
	if ok, err := passed(); ok || err != nil {
		return err
	}
	for c, col := range obj {
		if len(col) == 0 {
			continue
		}
		archived, err := pages.Decode(col)
		if err != nil {
			return err
		}
		held := map[int64]pages.Row{}
		for _, r := range rows {
			if len(r[c]) == 0 {
				continue
			}
			decoded, err := pages.Decode(r[c])
			if err != nil {
				return err
			}
			for _, e := range decoded {
				held[e.ID] = e
			}
		}
		for _, e := range archived {
			if mine, ok := held[e.ID]; !ok || !reflect.DeepEqual(mine, e) {
				how := "which this database never had"
				if ok {
					how = "as this database does not hold it"
				}
				return fmt.Errorf("archive: bucket %q's object of page %d (%s) holds event %d %s: the object is another "+
					"database's (HISTORY_BUCKET shared with another database, or this database restored from a backup older "+
					"than the bucket); the page stays in the database until the object is moved away", s.archive.Name(), page, archive.Key(page), e.ID, how)
			}
		}
	}
	return nil
}

// advance deletes page's rows, which must be rows (none: the page must still have none), counts
// the page (created: this move created its object of events) and its events as moved, and moves
// next_page past page if the move started there, and marked_next if it names the page (the
// caller has the page's object in the bucket: its events, or a marker): one transaction under the
// packs' turn, so that no pack writes the page or lowers next_page meanwhile.
func (s *Store) advance(ctx context.Context, page int64, created bool, events int64, rows [][pages.Columns][]byte) error {
	return s.core.InTx(ctx, func(tx *sql.Tx) error {
		if err := takePackTurn(ctx, tx); err != nil {
			return err
		}
		now, err := readPageRows(ctx, tx, archiveQueries.LockPageRows, page)
		if err != nil {
			return err
		}
		if !sameRows(now, rows) {
			return errArchiveRace
		}
		if len(now) > 0 {
			r, err := tx.ExecContext(ctx, archiveQueries.DeletePage, page)
			if err != nil {
				return err
			}
			if n, err := r.RowsAffected(); err != nil {
				return err
			} else if n != int64(len(now)) {
				return fmt.Errorf("archive: page %d: locked %d rows, deleting %d", page, len(now), n)
			}
		}
		hasRows := len(now) > 0
		if _, err := tx.ExecContext(ctx, archiveQueries.AdvanceArchive, created, hasRows, page, events, page, page+1, hasRows, page+1,
			page, page+1); err != nil {
			return err
		}
		if len(now) > 0 {
			archiveStep(ctx, page, "Commit")
		} else {
			archiveStep(ctx, page, "Pass")
		}
		return nil
	})
}

// passLarge moves next_page past page, too large to move, whose rows stay in the database, and
// marked_next (its marker is in the bucket): under the packs' turn, as advance. (advance passes a
// page only without rows: it took this one's for a race, and the move stopped here for good.)
// high_page is not raised for it: the rows are there.
func (s *Store) passLarge(ctx context.Context, page int64) error {
	return s.core.InTx(ctx, func(tx *sql.Tx) error {
		if err := takePackTurn(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, archiveQueries.AdvanceArchive, false, false, page, 0, page, page+1, false, page+1, page, page+1)
		return err
	})
}

// readPageRows reads every column of every row of page (PageRows or LockPageRows).
func readPageRows(ctx context.Context, q mysql.Conn, text string, page int64) ([][pages.Columns][]byte, error) {
	rs, err := q.QueryContext(ctx, text, page)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out [][pages.Columns][]byte
	for rs.Next() {
		var row [pages.Columns][]byte
		dest := make([]any, pages.Columns)
		for i := range row {
			dest[i] = &row[i]
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rs.Err()
}

// sameRows says whether a and b are the same rows, in any order.
func sameRows(a, b [][pages.Columns][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	digests := func(rows [][pages.Columns][]byte) []string {
		out := make([]string, len(rows))
		for i, r := range rows {
			h := sha256.New()
			for _, c := range r {
				fmt.Fprintf(h, "%d:", len(c))
				h.Write(c)
			}
			out[i] = string(h.Sum(nil))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(digests(a), digests(b))
}

// newerThan says whether any event of rows was created or processed at or after cutoff.
func newerThan(rows [][pages.Columns][]byte, cutoff time.Time) (bool, error) {
	for _, r := range rows {
		for _, col := range r {
			events, err := pages.Decode(col)
			if err != nil {
				return false, err
			}
			for _, e := range events {
				if !e.CreatedAt.Before(cutoff) || (e.ProcessedAt != nil && !e.ProcessedAt.Before(cutoff)) {
					return true, nil
				}
			}
		}
	}
	return false, nil
}
