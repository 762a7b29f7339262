package taskstore

// The reference directory (migrations/0016_reference_directory.sql, directory.sql): each
// reference's tasks, so that a reference's listing and a manual retry read the reference's own
// tasks by id instead of scanning the history for them.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// directoryTexts are the statements of directory.sql.
type directoryTexts struct {
	ReadDirectoryEntries, LogDirectory, LoggedSlots, SlotLog, DeleteSlotLog, AppendDirectory, DirectoryComplete,
	TakeBackfill, SetBackfill, BackfillTasks, TasksStarted string
}

const (
	// directorySlots is the rows of reference_directory; directoryColumns its cells per row.
	directorySlots   = 256
	directoryColumns = 100
	// entrySize is one entry: 8 bytes of the SHA-256 of the reference (its tag), the task's id and
	// its position, each big-endian.
	entrySize = 24
	// maxAppendEntries bounds one AppendDirectory statement: at most 128 cells named, about 90
	// bytes each once the driver writes the arguments into the text (interpolateParams), under the
	// 16 KB past which RDS Proxy pins a session.
	maxAppendEntries = 128
	// maxAppendBytes bounds the entries' bytes of one AppendDirectory statement, for the same
	// reason: the compaction's cells carry what was logged since the last one, which can be many
	// entries (a cell's bytes past it go in the next statement).
	maxAppendBytes = 8 << 10
	// maxLogRows bounds one LogDirectory statement (rows of about 60 bytes in the text each).
	maxLogRows = 128
	// compactRows is the most log rows one SlotLog read returns: a row holds what one create
	// transaction added to one cell (at most its batch's tasks, eventstore.MaxPendingBatch of 24
	// bytes each, 4.8 KB), so a read holds at most 2.5 MB. A bucket's four slots hold about
	// compactEvery rows when its create compacts them (a row a task when creates add one task to a
	// cell), which one read takes.
	compactRows = 512
	// compactEvery is how many positions of a task bucket a create passes before it compacts the
	// bucket's log (InsertTasks): a bucket's log holds the entries of at most that many tasks plus
	// one create's, so that what a read of a cell's log scans (a retry's, under the bucket) is
	// bounded by it, not by how often the sweeper runs. One create in compactEvery's tasks of a
	// bucket pays for moving them (about a millisecond a slot row at 10,000,000 tasks).
	compactEvery = 256
	// maxStartedIDs bounds the ids of one TasksStarted statement.
	maxStartedIDs = 500
)

// directoryStepKey is the context key of WithDirectorySteps' function.
type directoryStepKey struct{}

// WithDirectorySteps returns ctx carrying f: the directory's upkeep run under it (BackfillDirectory,
// CompactDirectory) calls f with its transaction before each of its statements, named as in
// directory.sql (and LockTaskBuckets, tasks.sql's), and before it commits ("Commit"). Only the
// tests, which kill a process at the step of their choice, set one.
func WithDirectorySteps(ctx context.Context, f func(tx mysql.Conn, step string)) context.Context {
	return context.WithValue(ctx, directoryStepKey{}, f)
}

func directoryStep(ctx context.Context, tx mysql.Conn, step string) {
	if f, ok := ctx.Value(directoryStepKey{}).(func(mysql.Conn, string)); ok {
		f(tx, step)
	}
}

// cell is where a reference's entries are: a column of a slot's row, and the tag that marks them.
type cell struct {
	slot int64
	col  int
	tag  [8]byte
}

// cellOf is the cell of reference ref: its task bucket plus 64 times 2 bits of its SHA-256 (so
// that the slot's writers all hold that bucket), a column from another byte, and 8 more bytes as
// its tag. A tag shared by two references (2^-64 per pair in one cell) would make their listings
// read each other's tasks, which the readers pass over: they check each task's reference.
func cellOf(ref string) cell {
	sum := sha256.Sum256([]byte(ref))
	var c cell
	c.slot = taskBucket(ReferenceHash(ref)) + taskBuckets*int64(sum[0]%(directorySlots/taskBuckets))
	c.col = int(sum[1]) % directoryColumns
	copy(c.tag[:], sum[8:16])
	return c
}

// entry is a task of a reference, as its directory holds it.
type entry struct {
	id, position int64
}

// refEntry is an entry to append: its reference and task.
type refEntry struct {
	ref string
	entry
}

func appendEntryBytes(b []byte, tag [8]byte, e entry) []byte {
	b = append(b, tag[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.id))
	return binary.BigEndian.AppendUint64(b, uint64(e.position))
}

// cellKey names a cell: its column and its slot.
type cellKey struct {
	col  int
	slot int64
}

// cellBytes is what is appended to cells: each cell's bytes, and the cells in (column, slot)
// order.
type cellBytes struct {
	keys  []cellKey
	bytes map[cellKey][]byte
	first map[cellKey]int64 // the id of the cell's first entry (the log's first_id)
}

func (cb *cellBytes) add(k cellKey, b []byte, first int64) {
	if cb.bytes == nil {
		cb.bytes, cb.first = map[cellKey][]byte{}, map[cellKey]int64{}
	}
	if _, ok := cb.bytes[k]; !ok {
		cb.keys = append(cb.keys, k)
		cb.first[k] = first
	}
	cb.bytes[k] = append(cb.bytes[k], b...)
}

// groupEntries groups entries by their references' cells, in the order of the entries.
func groupEntries(entries []refEntry) *cellBytes {
	cb := &cellBytes{}
	for _, e := range entries {
		c := cellOf(e.ref)
		cb.add(cellKey{c.col, c.slot}, appendEntryBytes(nil, c.tag, e.entry), e.id)
	}
	return cb
}

// logDirectory logs a create's entries (LogDirectory): a row for each cell, in tx, which holds the
// task buckets of their references. The sweeper moves them into their cells (CompactDirectory).
func logDirectory(ctx context.Context, tx mysql.Conn, entries []refEntry) error {
	cb := groupEntries(entries)
	for keys := cb.keys; len(keys) > 0; {
		n := min(len(keys), maxLogRows)
		args := make([]any, 0, 4*n)
		for _, k := range keys[:n] {
			args = append(args, k.slot, k.col, cb.first[k], cb.bytes[k])
		}
		keys = keys[n:]
		q := strings.Replace(dirQueries.LogDirectory, "/*rows*/", strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", n), ", "), 1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// appendDirectory appends the entries to their references' cells, in tx, which holds the task
// buckets of their references: a retry to the end's and the backfill's. The slots' log is compacted
// first (compactSlots), so that a task's new entry follows its create's in the cell.
func appendDirectory(ctx context.Context, tx mysql.Conn, entries []refEntry) error {
	cb := groupEntries(entries)
	var slots []int64
	for _, k := range cb.keys {
		slots = append(slots, k.slot)
	}
	if _, err := compactSlots(ctx, tx, slots); err != nil {
		return err
	}
	return writeCells(ctx, tx, cb)
}

// writeCells appends cb's bytes to their cells, in tx, which holds the cells' task buckets: a
// statement per maxAppendEntries cells or maxAppendBytes bytes (AppendDirectory). The cells are
// taken slot by slot, and a slot whose cells would not all fit in a statement begins the next, so
// that a slot's row, which each statement that names it rewrites whole (its hundred cells), is
// rewritten once unless its cells' bytes need more: a compaction of four slots' cells in two
// statements taken column by column rewrote each row twice.
func writeCells(ctx context.Context, tx mysql.Conn, cb *cellBytes) error {
	keys := slices.Clone(cb.keys)
	slices.SortFunc(keys, func(a, b cellKey) int { return cmp.Or(cmp.Compare(a.slot, b.slot), cmp.Compare(a.col, b.col)) })
	rest := map[cellKey][]byte{}
	for _, k := range keys {
		rest[k] = cb.bytes[k]
	}
	for len(keys) > 0 {
		// A statement: cells in order while they fit; a cell larger than what is left goes in part.
		var chunk []cellKey
		part := map[cellKey][]byte{}
		size := 0
		for len(keys) > 0 && len(chunk) < maxAppendEntries && size < maxAppendBytes {
			k := keys[0]
			if len(chunk) > 0 && k.slot != chunk[len(chunk)-1].slot {
				// A slot's cells that would not all fit in this statement start the next one.
				n := 0
				for n < len(keys) && keys[n].slot == k.slot {
					n++
				}
				if len(chunk)+n > maxAppendEntries {
					break
				}
			}
			b := rest[k]
			take := min(len(b), maxAppendBytes-size)
			chunk, part[k], size = append(chunk, k), b[:take], size+take
			if rest[k] = b[take:]; len(rest[k]) == 0 {
				keys = keys[1:]
			}
		}
		// In the statement, a CASE per column: its cells column by column.
		slices.SortFunc(chunk, func(a, b cellKey) int { return cmp.Or(cmp.Compare(a.col, b.col), cmp.Compare(a.slot, b.slot)) })
		var sets []string
		var args []any
		var slots []int64
		for i := 0; i < len(chunk); {
			col := chunk[i].col
			var whens []string
			for ; i < len(chunk) && chunk[i].col == col; i++ {
				whens = append(whens, fmt.Sprintf("WHEN ? THEN CONCAT(d%d, ?)", col))
				args = append(args, chunk[i].slot, part[chunk[i]])
				slots = append(slots, chunk[i].slot)
			}
			sets = append(sets, fmt.Sprintf("d%d = CASE slot %s ELSE d%d END", col, strings.Join(whens, " "), col))
		}
		slots = mysql.Unique(slots)
		slices.Sort(slots)
		q, ids := mysql.ExpandIDs(strings.Replace(dirQueries.AppendDirectory, "/*sets*/", strings.Join(sets, ", "), 1), slots)
		directoryStep(ctx, tx, "AppendDirectory")
		res, err := tx.ExecContext(ctx, q, append(args, ids...)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(slots)) {
			return fmt.Errorf("reference_directory: %d of the %d slots written were there: the table was changed by hand", n, len(slots))
		}
	}
	return nil
}

// slotsOfBucket are the directory's slots whose writers hold task bucket b (cellOf).
func slotsOfBucket(b int64) []int64 {
	out := make([]int64, 0, directorySlots/taskBuckets)
	for s := b; s < directorySlots; s += taskBuckets {
		out = append(out, s)
	}
	return out
}

// compactSlots moves the log rows of slots into their cells and deletes them, in tx, which holds
// the slots' task buckets: the rows of all the slots read, appended (writeCells) and deleted
// compactRows at a time, a statement each, whatever the number of slots (a create's compaction of a
// bucket's four slots was a read, an append and a delete per slot: twelve round trips under the
// buckets every create of those references waits for). It returns how many rows it moved.
func compactSlots(ctx context.Context, tx mysql.Conn, slots []int64) (int, error) {
	slots = mysql.Unique(slices.Clone(slots))
	slices.Sort(slots)
	moved := 0
	for len(slots) > 0 {
		cb, firsts, err := readSlotLog(ctx, tx, slots)
		if err != nil || len(firsts) == 0 {
			return moved, err
		}
		if err := writeCells(ctx, tx, cb); err != nil {
			return moved, err
		}
		var read []int64
		for _, k := range cb.keys {
			read = append(read, k.slot)
		}
		read = mysql.Unique(read)
		q := strings.Replace(dirQueries.DeleteSlotLog, "/*slots*/", mysql.Placeholders(len(read)), 1)
		q, args := mysql.ExpandIDs(q, firsts)
		directoryStep(ctx, tx, "DeleteSlotLog")
		res, err := tx.ExecContext(ctx, q, append(mysql.IDArgs(read), args...)...)
		if err != nil {
			return moved, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return moved, err
		} else if n != int64(len(firsts)) {
			return moved, fmt.Errorf("reference_directory_log: deleted %d of the %d rows of slots %v just compacted", n, len(firsts), read)
		}
		moved += len(firsts)
		if len(firsts) < compactRows {
			break
		}
	}
	return moved, nil
}

// readSlotLog reads up to compactRows log rows of slots (SlotLog): their bytes by cell, in the
// order logged, and their first ids.
func readSlotLog(ctx context.Context, tx mysql.Conn, slots []int64) (*cellBytes, []int64, error) {
	q := strings.Replace(dirQueries.SlotLog, "/*slots*/", mysql.Placeholders(len(slots)), 1)
	directoryStep(ctx, tx, "SlotLog")
	rows, err := tx.QueryContext(ctx, q, append(mysql.IDArgs(slots), compactRows)...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cb := &cellBytes{}
	var firsts []int64
	for rows.Next() {
		var slot int64
		var col int
		var first int64
		var b []byte
		if err := rows.Scan(&slot, &col, &first, &b); err != nil {
			return nil, nil, err
		}
		if !slices.Contains(slots, slot) || col < 0 || col >= directoryColumns || len(b)%entrySize != 0 {
			return nil, nil, fmt.Errorf("reference_directory_log: a row of slot %d names column %d with %d bytes: the table was changed by hand", slot, col, len(b))
		}
		cb.add(cellKey{col, slot}, b, first)
		firsts = append(firsts, first)
	}
	return cb, firsts, rows.Err()
}

// CompactDirectory moves what creates logged into the directory's cells (compactSlots), a bucket's
// slots per transaction with the bucket held, until every slot that had log rows when it began is
// done or until is passed (checked between buckets). It returns how many log rows it moved. The
// sweeper's maintenance runs it; safe from many at once (each bucket's turn is its lock).
func (s *Store) CompactDirectory(ctx context.Context, until time.Time) (int, error) {
	rows, err := s.db.QueryContext(ctx, dirQueries.LoggedSlots)
	if err != nil {
		return 0, mysql.Interpret("compact the reference directory", err)
	}
	byBucket := map[int64][]int64{}
	for rows.Next() {
		var slot int64
		if err := rows.Scan(&slot); err != nil {
			rows.Close()
			return 0, mysql.Interpret("compact the reference directory", err)
		}
		b := slot % taskBuckets
		byBucket[b] = append(byBucket[b], slot)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, mysql.Interpret("compact the reference directory", err)
	}
	buckets := slices.Sorted(maps.Keys(byBucket))
	moved := 0
	for _, b := range buckets {
		if time.Now().After(until) {
			break
		}
		err := s.core.InTx(ctx, func(tx *sql.Tx) error {
			directoryStep(ctx, tx, "LockTaskBuckets")
			if err := lockTaskBucketsOnly(ctx, tx, []int64{b}); err != nil {
				return err
			}
			n, err := compactSlots(ctx, tx, byBucket[b])
			if err == nil {
				directoryStep(ctx, tx, "Commit")
			}
			moved += n
			return err
		})
		if err != nil {
			return moved, mysql.Interpret("compact the reference directory", err)
		}
	}
	return moved, nil
}

// readEntryBytes reads a cell with what was logged for it (ReadDirectoryEntries): the log's bytes,
// then the cell's.
func readEntryBytes(ctx context.Context, q mysql.Conn, c cell) ([]byte, error) {
	text := strings.Replace(dirQueries.ReadDirectoryEntries, "/*column*/", fmt.Sprintf("d%d", c.col), 1)
	directoryStep(ctx, q, "ReadDirectoryEntries")
	rows, err := q.QueryContext(ctx, text, c.slot, c.col, c.slot)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var logged, cellB []byte
	cells := 0
	for rows.Next() {
		var part int
		var b []byte
		if err := rows.Scan(&part, &b); err != nil {
			return nil, err
		}
		if part == 0 {
			logged = append(logged, b...)
		} else {
			cellB, cells = b, cells+1
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if cells != 1 {
		return nil, fmt.Errorf("reference_directory has %d rows for slot %d: the table was changed by hand", cells, c.slot)
	}
	return append(logged, cellB...), nil
}

// cellEntries are the entries of tag in a cell's bytes, one per task (the last entry of a task
// wins: a retry to the end appends its new position), in position order.
func cellEntries(b []byte, tag [8]byte) []entry {
	last := map[int64]int{}
	var out []entry
	for off := 0; off+entrySize <= len(b); off += entrySize {
		if !bytes.Equal(b[off:off+8], tag[:]) {
			continue
		}
		e := entry{id: int64(binary.BigEndian.Uint64(b[off+8:])), position: int64(binary.BigEndian.Uint64(b[off+16:]))}
		if i, ok := last[e.id]; ok {
			out[i] = e
			continue
		}
		last[e.id] = len(out)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(a.position, b.position) })
	return out
}

// referenceEntries reads reference ref's tasks from its directory, in position order.
func referenceEntries(ctx context.Context, q mysql.Conn, ref string) ([]entry, error) {
	c := cellOf(ref)
	b, err := readEntryBytes(ctx, q, c)
	if err != nil {
		return nil, err
	}
	return cellEntries(b, c.tag), nil
}

// directoryComplete tells whether every task has its directory entries (the backfill is done),
// cached once true.
func (s *Store) directoryComplete(ctx context.Context, q mysql.Conn) (bool, error) {
	if s.directoryDone.Load() {
		return true, nil
	}
	var n int64
	if err := q.QueryRowContext(ctx, dirQueries.DirectoryComplete).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		s.directoryDone.Store(true)
	}
	return n > 0, nil
}

// laterTaskStarted tells whether a task of reference ref after position pos has started (settled,
// processing, or attempted), but those of except: with the reference's bucket and heads held, by
// its directory and then its later tasks by id (tasksStartedAfter).
func laterTaskStarted(ctx context.Context, tx mysql.Conn, ref string, pos int64, except map[int64]bool) (bool, error) {
	entries, err := referenceEntries(ctx, tx, ref)
	if err != nil {
		return false, err
	}
	return tasksStartedAfter(ctx, tx, entries, pos, except, false)
}

// tasksStartedAfter tells whether a task of entries (a reference's, from its directory) after
// position pos has started, but those of except, by their ids (TasksStarted). A later task that
// `events` does not hold was packed, so delivered.
//
// With exceptFailed, the failed tasks (by their state) are left out too, as a reference's bulk
// retry asks: it retries every failed task of the reference, in parts, so each is "retried with
// it", and it names none (they may be more than a part holds).
func tasksStartedAfter(ctx context.Context, tx mysql.Conn, entries []entry, pos int64, except map[int64]bool, exceptFailed bool) (bool, error) {
	var later []int64
	for _, e := range entries {
		if e.position > pos && !except[e.id] {
			later = append(later, e.id)
		}
	}
	for len(later) > 0 {
		n := min(len(later), maxStartedIDs)
		q, args := mysql.ExpandIDs(dirQueries.TasksStarted, later[:n])
		var found, started, startedNotFailed int64
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&found, &started, &startedNotFailed); err != nil {
			return false, err
		}
		if exceptFailed {
			started = startedNotFailed
		}
		if started > 0 || found < int64(n) {
			return true, nil
		}
		later = later[n:]
	}
	return false, nil
}

// taskEntries are the directory entries of the tasks of rows that have a reference.
func taskEntries(rows []taskRow) []refEntry {
	var out []refEntry
	for _, r := range rows {
		if r.task.ReferenceID != "" {
			out = append(out, refEntry{ref: r.task.ReferenceID, entry: entry{id: r.id, position: r.position.Int64}})
		}
	}
	return out
}

// DirectoryCell is where reference ref's directory entries are: the slot (row) and the column
// (dN) of reference_directory. For the benchmark's seeding, which fills a cell as a long history
// of tasks would.
func DirectoryCell(ref string) (slot int64, column int) {
	c := cellOf(ref)
	return c.slot, c.col
}
