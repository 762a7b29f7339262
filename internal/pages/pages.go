// Package pages is the format of the packed history (migrations/0012_event_pages.sql).
//
// The sweeper packs settled events out of the `events` table into page rows of `event_pages`, ten
// thousand consecutive ids a page, so that a read of one old event scans one partition of about one
// page row instead of a share of the whole history (no index is allowed). A page row holds its
// events in Columns BLOB columns of PerColumn ids each, and a read names only the column that holds
// its id: InnoDB copies the BLOBs a statement reads of every row it scans, so reading one column of
// a hundred copies a hundredth of the page, and the fewer rows a partition holds, the fewer BLOBs
// are copied for rows that do not match.
//
// The sweeper packs a unit of Unit ids (ten columns) at a time, once every event of those ids has
// settled: the first unit of a page inserts its row, the next ones write their columns of it.
//
// A column is a version byte and then records, in ascending id order, each one its length (an
// unsigned varint) and its body: the id first, so that Find skips the other records without
// decoding them. Every column of a page row is present, empty columns as the version byte alone.
package pages

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

const (
	// Size is the number of ids a page row covers: page p holds ids p*Size .. p*Size+Size-1.
	Size = 10_000
	// Columns is the number of BLOB columns of a page row, c0 .. c99.
	Columns = 100
	// PerColumn is the number of ids a column covers.
	PerColumn = Size / Columns
	// Unit is the number of ids the sweeper packs at once: UnitColumns columns of one page.
	Unit = 1000
	// UnitColumns is the number of columns of a unit.
	UnitColumns = Unit / PerColumn
	// version is the first byte of every column.
	version = 1
)

// PageOf is the page that holds id.
func PageOf(id int64) int64 { return id / Size }

// ColumnOf is the column of its page that holds id.
func ColumnOf(id int64) int { return int(id % Size / PerColumn) }

// UnitOf is the unit that holds id.
func UnitOf(id int64) int64 { return id / Unit }

// UnitPage is the page of a unit, and FirstColumn the first of its UnitColumns columns there.
func UnitPage(unit int64) int64 { return unit * Unit / Size }

// FirstColumn is the first column of a unit in its page.
func FirstColumn(unit int64) int { return int(unit*Unit%Size) / PerColumn }

// RecordOverhead bounds the bytes a record takes in a column beyond its strings and bytes: its
// length, the id, the flags, the routing hash, every integer and time (varints of at most ten
// bytes), each string's length and the reference's hash. AttemptOverhead bounds the same of one
// delivery attempt beyond its error and claim. With them a writer bounds what events take in a
// column from the lengths of their columns alone, before it reads them (SizeBound).
const (
	RecordOverhead  = 256
	AttemptOverhead = 64
)

// SizeBound is at least the bytes r takes in a column.
func SizeBound(r Row) int {
	n := RecordOverhead + len(r.Kind) + len(r.Payload)
	for _, s := range []*string{r.Value, r.ProcessedBy, r.LastError, r.URL, r.ReferenceID, r.ClaimID, r.WorkerID} {
		if s != nil {
			n += len(*s)
		}
	}
	for _, a := range r.TaskAttempts {
		n += AttemptOverhead + len(a.ClaimID)
		if a.Error != nil {
			n += len(*a.Error)
		}
	}
	return n
}

// Empty is an empty column.
func Empty() []byte { return []byte{version} }

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

// Encode returns the UnitColumns columns of one unit (from FirstColumn(unit) on in its page)
// holding rows, which must all be of that unit. The rows may come in any order; each id may appear
// once.
func Encode(rows []Row) (unit int64, cols [UnitColumns][]byte, err error) {
	if len(rows) == 0 {
		return 0, cols, errors.New("pages: nothing to encode")
	}
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b Row) int { return cmp.Compare(a.ID, b.ID) })
	unit = UnitOf(sorted[0].ID)
	for i := range cols {
		cols[i] = Empty()
	}
	first := FirstColumn(unit)
	var body []byte
	for i, r := range sorted {
		if r.ID < 0 || UnitOf(r.ID) != unit {
			return 0, cols, fmt.Errorf("pages: event %d is not of unit %d", r.ID, unit)
		}
		if i > 0 && sorted[i-1].ID == r.ID {
			return 0, cols, fmt.Errorf("pages: event %d twice", r.ID)
		}
		body = encodeRow(body[:0], r)
		c := ColumnOf(r.ID) - first
		cols[c] = binary.AppendUvarint(cols[c], uint64(len(body)))
		cols[c] = append(cols[c], body...)
	}
	return unit, cols, nil
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
