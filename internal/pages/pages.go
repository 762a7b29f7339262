// Package pages is the format of the packed event history (issue 19, migrations/0012_event_pages.sql).
//
// The sweeper packs settled events out of the `events` table into page rows of `event_pages`, a
// thousand consecutive ids a page, so that a read of one old event scans one partition of about ten
// page rows instead of a share of the whole history (no index is allowed). A page row holds its
// events in Columns BLOB columns of PerColumn ids each, and a read names only the column that holds
// its id: InnoDB copies the BLOBs of every row it scans, so reading one column of ten copies a
// tenth of the page. This package encodes and decodes one column; it knows nothing of SQL.
//
// A column is a version byte and then records, in ascending id order, each one its length (an
// unsigned varint) and its body: the id first, so that Find skips the other records without
// decoding them. Every column of a page row is present, empty columns as the version byte alone.
package pages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

const (
	// Size is the number of ids a page covers: page p holds ids p*Size .. p*Size+Size-1.
	Size = 1000
	// Columns is the number of BLOB columns of a page row, c0 .. c9.
	Columns = 10
	// PerColumn is the number of ids a column covers.
	PerColumn = Size / Columns
	// version is the first byte of every column.
	version = 1
)

// PageOf is the page that holds id.
func PageOf(id int64) int64 { return id / Size }

// ColumnOf is the column of its page that holds id.
func ColumnOf(id int64) int { return int(id % Size / PerColumn) }

// Row is one packed event: every column of its `events` row but the lease (a settled event holds
// none), and the attempts of its delivery when it is a task (task_attempts' rows, packed with it).
type Row struct {
	ID            int64
	RoutingHash   uint32
	Kind          string
	State         int
	Value         *string
	CreatedAt     time.Time
	ProcessedAt   *time.Time
	ProcessedBy   *string
	ProcessCount  int64
	Attempts      int64
	LastError     *string
	NextAttemptAt *time.Time
	URL           *string
	Payload       []byte // nil: NULL
	ReferenceID   *string
	MaxRetries    *int64
	Position      *int64
	ClaimID       *string
	WorkerID      *string
	TaskAttempts  []Attempt
}

// Attempt is one delivery attempt of a task (a task_attempts row).
type Attempt struct {
	Number     int64
	StartedAt  time.Time
	DurationUS int64
	Status     int64
	Error      *string
	ClaimID    string
}

// Encode returns the columns of one page row holding rows, which must all be of one page. The rows
// may come in any order; each id may appear once.
func Encode(rows []Row) (page int64, cols [Columns][]byte, err error) {
	if len(rows) == 0 {
		return 0, cols, errors.New("pages: nothing to encode")
	}
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b Row) int { return cmpInt(a.ID, b.ID) })
	page = PageOf(sorted[0].ID)
	for i := range cols {
		cols[i] = []byte{version}
	}
	var body []byte
	for i, r := range sorted {
		if r.ID < 0 || PageOf(r.ID) != page {
			return 0, cols, fmt.Errorf("pages: event %d is not of page %d", r.ID, page)
		}
		if i > 0 && sorted[i-1].ID == r.ID {
			return 0, cols, fmt.Errorf("pages: event %d twice", r.ID)
		}
		body = encodeRow(body[:0], r)
		c := ColumnOf(r.ID)
		cols[c] = binary.AppendUvarint(cols[c], uint64(len(body)))
		cols[c] = append(cols[c], body...)
	}
	return page, cols, nil
}

// Find returns the row of id in a column, if the column holds it. It decodes that row alone.
func Find(col []byte, id int64) (Row, bool, error) {
	var found Row
	ok := false
	err := walk(col, func(rid int64, body []byte) (bool, error) {
		if rid != id {
			return rid < id, nil // ascending: past id, it is not there
		}
		r, err := decodeRow(body)
		found, ok = r, err == nil
		return false, err
	})
	return found, ok, err
}

// Decode returns every row of a column, in ascending id order.
func Decode(col []byte) ([]Row, error) {
	var out []Row
	err := walk(col, func(_ int64, body []byte) (bool, error) {
		r, err := decodeRow(body)
		out = append(out, r)
		return true, err
	})
	return out, err
}

// walk calls f with each record's id and body until f returns false or an error.
func walk(col []byte, f func(id int64, body []byte) (bool, error)) error {
	if len(col) == 0 || col[0] != version {
		return fmt.Errorf("pages: a column of an unknown format (%d bytes)", len(col))
	}
	b := col[1:]
	prev := int64(-1)
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return errors.New("pages: a truncated record")
		}
		body := b[k : k+int(n)]
		b = b[k+int(n):]
		id, k := binary.Varint(body)
		if k <= 0 || id <= prev {
			return errors.New("pages: a record without an id, or out of order")
		}
		prev = id
		more, err := f(id, body)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
