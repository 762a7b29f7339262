package taskstore

// The backfill of the reference directory (migrations/0016_reference_directory.sql, directory.sql):
// the tasks stored before the directory existed get their entries from the sweeper's maintenance,
// a unit of ids per transaction, resumably, while everything else runs.

import (
	"context"
	"database/sql"
	"errors"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// backfillUnit is the ids one backfill transaction covers: a pack unit, whose packed tasks are in
// ten columns of one page, read a column at a time (a column is at most a few MB: the pack keeps a
// statement under 4 MB).
const backfillUnit = pages.Unit

// errBackfillTaken ends a backfill transaction that found another sweeper backfilling, or that
// it may not begin yet.
var errBackfillTaken = errors.New("the backfill's row is taken")

// BackfillDirectory adds the directory entries of the tasks stored before migration 0016, a unit
// of ids per transaction (backfillUnit), up to maxUnits units, and tells whether the directory is
// complete. The first transaction records where it ends: the id counter then (every task created
// since has its entries from its create; the ones of ids at or below it are walked, and an id the
// directory already holds is passed over). A transaction that finds another sweeper backfilling
// (TakeBackfill's SKIP LOCKED) ends the call, not done. Killed at any point, it loses nothing: a
// unit's entries and its progress commit together.
func (s *Store) BackfillDirectory(ctx context.Context, maxUnits int) (units int, done bool, err error) {
	for units < maxUnits {
		var complete bool
		err := s.core.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			complete, err = s.backfillUnit(ctx, tx)
			if err == nil {
				directoryStep(ctx, tx, "Commit")
			}
			return err
		})
		if errors.Is(err, errBackfillTaken) {
			return units, false, nil
		}
		if err != nil {
			return units, false, mysql.Interpret("backfill the reference directory", err)
		}
		if complete {
			s.directoryDone.Store(true)
			return units, true, nil
		}
		units++
	}
	return units, false, nil
}

// backfillUnit backfills the next unit of ids in tx, and tells whether nothing was left to do.
func (s *Store) backfillUnit(ctx context.Context, tx *sql.Tx) (bool, error) {
	var next int64
	var until sql.NullInt64
	var may bool
	directoryStep(ctx, tx, "TakeBackfill")
	err := tx.QueryRowContext(ctx, dirQueries.TakeBackfill).Scan(&next, &until, &may)
	if errors.Is(err, sql.ErrNoRows) {
		return false, errBackfillTaken
	}
	if err != nil {
		return false, err
	}
	if !until.Valid && !may {
		return false, errBackfillTaken // not yet: the previous version may still be creating
	}
	if !until.Valid {
		// Where it ends: every id at or below the counter has been handed out.
		counter, err := s.core.ReadIDCounter(ctx)
		if err != nil {
			return false, err
		}
		until = sql.NullInt64{Int64: counter + 1, Valid: true}
		directoryStep(ctx, tx, "SetBackfill")
		if _, err := tx.ExecContext(ctx, dirQueries.SetBackfill, next, until.Int64); err != nil {
			return false, err
		}
	}
	if next >= until.Int64 {
		return true, nil
	}
	hi := min(next+backfillUnit, until.Int64)
	found, err := backfillTasks(ctx, s.history, tx, next, hi)
	if err != nil {
		return false, err
	}
	if len(found) > 0 {
		if err := appendMissing(ctx, tx, found); err != nil {
			return false, err
		}
	}
	directoryStep(ctx, tx, "SetBackfill")
	_, err = tx.ExecContext(ctx, dirQueries.SetBackfill, hi, until.Int64)
	return hi >= until.Int64, err
}

// backfillTasks reads the tasks with a reference among ids [lo, hi): those in `events` first, then
// the packed ones through h, in both of the history's tiers (a pack moves tasks from `events` to
// page rows in one transaction, and the move writes a page's object before it deletes its rows, so
// a task missed by one read is in the next), each once. An archived page's object is read once per
// unit (h.ReadColumns, one GET for the unit's columns): no lock a writer needs is held yet.
func backfillTasks(ctx context.Context, h pagestore.History, tx *sql.Tx, lo, hi int64) ([]refEntry, error) {
	directoryStep(ctx, tx, "BackfillTasks")
	rows, err := tx.QueryContext(ctx, dirQueries.BackfillTasks, lo, hi)
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	var out []refEntry
	for rows.Next() {
		var e refEntry
		var pos sql.NullInt64
		if err := rows.Scan(&e.id, &e.ref, &pos); err != nil {
			rows.Close()
			return nil, err
		}
		e.position = pos.Int64
		seen[e.id] = true
		out = append(out, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	page := pages.PageOf(lo)
	if h.Archive == nil {
		// A column at a time: page rows only, a column at most a few MB.
		for c := pages.ColumnOf(lo); c <= pages.ColumnOf(hi-1); c++ {
			packed, err := h.ReadColumns(ctx, tx, page, c, 1)
			if err != nil {
				return nil, err
			}
			out = addPacked(out, seen, packed, lo, hi)
		}
		return out, nil
	}
	// With an archive, the unit's columns in one read: one GET of the page's object if the move has
	// passed the page, not one per column (the unit's ten columns and the object, a page's at most
	// 32 MB, fit a sweeper's 256 MB).
	first := pages.ColumnOf(lo)
	packed, err := h.ReadColumns(ctx, tx, page, first, pages.ColumnOf(hi-1)-first+1)
	if err != nil {
		return nil, err
	}
	return addPacked(out, seen, packed, lo, hi), nil
}

// addPacked appends to out the entries of the packed tasks of rows with an id in [lo, hi) that seen
// does not hold, and marks them seen.
func addPacked(out []refEntry, seen map[int64]bool, rows []pages.Row, lo, hi int64) []refEntry {
	for _, r := range rows {
		if r.ID < lo || r.ID >= hi || seen[r.ID] || r.Kind != string(exactlyonce.KindTask) || r.ReferenceID == nil ||
			*r.ReferenceID == "" || r.Position == nil {
			continue
		}
		seen[r.ID] = true
		out = append(out, refEntry{ref: *r.ReferenceID, entry: entry{id: r.ID, position: *r.Position}})
	}
	return out
}

// appendMissing locks the task buckets of the entries' references, reads their cells under the
// locks, and appends the entries of the tasks the cells do not hold yet (a task created since the
// migration has its entry from its create; a task moved to the end by a retry since, its new one).
func appendMissing(ctx context.Context, tx *sql.Tx, found []refEntry) error {
	var buckets []int64
	for _, e := range found {
		buckets = append(buckets, taskBucket(ReferenceHash(e.ref)))
	}
	directoryStep(ctx, tx, "LockTaskBuckets")
	if err := lockTaskBucketsOnly(ctx, tx, buckets); err != nil {
		return err
	}
	// What creates logged for these slots goes into their cells first, so that the cells hold
	// every entry there is.
	var slots []int64
	for _, e := range found {
		slots = append(slots, cellOf(e.ref).slot)
	}
	if _, err := compactSlots(ctx, tx, slots); err != nil {
		return err
	}
	held := map[cell]map[int64]bool{}
	var missing []refEntry
	for _, e := range found {
		c := cellOf(e.ref)
		ids, ok := held[c]
		if !ok {
			b, err := readEntryBytes(ctx, tx, c)
			if err != nil {
				return err
			}
			ids = map[int64]bool{}
			for _, en := range cellEntries(b, c.tag) {
				ids[en.id] = true
			}
			held[c] = ids
		}
		if !ids[e.id] {
			missing = append(missing, e)
		}
	}
	// The slots were compacted above, under the same locks: the entries go straight to the cells.
	return writeCells(ctx, tx, groupEntries(missing))
}
