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
	"embed"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

//go:embed directory.sql
var directoryFiles embed.FS

// directoryTexts are the statements of directory.sql.
type directoryTexts struct {
	ReadDirectoryCell, AppendDirectory, DirectoryComplete, TakeBackfill, SetBackfill, BackfillTasks, TasksStarted string
}

var dirQueries = mysql.MustLoadQueries[directoryTexts](directoryFiles)

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
	// maxStartedIDs bounds the ids of one TasksStarted statement.
	maxStartedIDs = 500
)

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

// appendDirectory appends the entries to their references' cells, in tx, which holds the task
// buckets of their references: a statement per maxAppendEntries entries (AppendDirectory).
func appendDirectory(ctx context.Context, tx mysql.Conn, entries []refEntry) error {
	for len(entries) > 0 {
		n := min(len(entries), maxAppendEntries)
		chunk := entries[:n]
		entries = entries[n:]
		// The bytes of each (column, slot), in the order of the entries.
		type key struct {
			col  int
			slot int64
		}
		added := map[key][]byte{}
		var keys []key
		for _, e := range chunk {
			c := cellOf(e.ref)
			k := key{c.col, c.slot}
			if _, ok := added[k]; !ok {
				keys = append(keys, k)
			}
			added[k] = appendEntryBytes(added[k], c.tag, e.entry)
		}
		slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.col, b.col), cmp.Compare(a.slot, b.slot)) })
		var sets []string
		var args []any
		var slots []int64
		for i := 0; i < len(keys); {
			col := keys[i].col
			var whens []string
			for ; i < len(keys) && keys[i].col == col; i++ {
				whens = append(whens, fmt.Sprintf("WHEN ? THEN CONCAT(d%d, ?)", col))
				args = append(args, keys[i].slot, added[keys[i]])
				slots = append(slots, keys[i].slot)
			}
			sets = append(sets, fmt.Sprintf("d%d = CASE slot %s ELSE d%d END", col, strings.Join(whens, " "), col))
		}
		slots = mysql.Unique(slots)
		slices.Sort(slots)
		q, ids := mysql.ExpandIDs(strings.Replace(dirQueries.AppendDirectory, "/*sets*/", strings.Join(sets, ", "), 1), slots)
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

// readCell reads a cell (ReadDirectoryCell).
func readCell(ctx context.Context, q mysql.Conn, c cell) ([]byte, error) {
	text := strings.Replace(dirQueries.ReadDirectoryCell, "/*column*/", fmt.Sprintf("d%d", c.col), 1)
	var b []byte
	err := q.QueryRowContext(ctx, text, c.slot).Scan(&b)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("reference_directory has no row for slot %d: the table was changed by hand", c.slot)
	}
	return b, err
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
	b, err := readCell(ctx, q, c)
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
	return tasksStartedAfter(ctx, tx, entries, pos, except)
}

// tasksStartedAfter tells whether a task of entries (a reference's, from its directory) after
// position pos has started, but those of except, by their ids (TasksStarted). A later task that
// `events` does not hold was packed, so delivered.
func tasksStartedAfter(ctx context.Context, tx mysql.Conn, entries []entry, pos int64, except map[int64]bool) (bool, error) {
	var later []int64
	for _, e := range entries {
		if e.position > pos && !except[e.id] {
			later = append(later, e.id)
		}
	}
	for len(later) > 0 {
		n := min(len(later), maxStartedIDs)
		q, args := mysql.ExpandIDs(dirQueries.TasksStarted, later[:n])
		var found, started int64
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&found, &started); err != nil {
			return false, err
		}
		if started > 0 || found < int64(n) {
			return true, nil
		}
		later = later[n:]
	}
	return false, nil
}

// taggedEntries are the bytes of a cell's entries that carry tag, in the cell's order: what a
// reference's tasks have appended to it (a retry compares them before and after it takes the
// bucket, retryInPlaceFirst).
func taggedEntries(b []byte, tag [8]byte) []byte {
	var out []byte
	for off := 0; off+entrySize <= len(b); off += entrySize {
		if bytes.Equal(b[off:off+8], tag[:]) {
			out = append(out, b[off:off+entrySize]...)
		}
	}
	return out
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
