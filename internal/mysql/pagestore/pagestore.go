// Package pagestore is the packed history (migrations/0012_event_pages.sql, pages.sql,
// internal/pages): the sweeper packs folded events out of `events` into page rows of ten thousand
// ids, a unit of a thousand at a time (PackPages, pack.go), so that a read of an old event scans
// one partition of about one page row instead of a share of the history. Issue 29 made the pack
// exact whatever runs beside it (it locks what it packs, and packs take turns) and bounded its
// memory by bytes (packTx).
//
// It depends on the core only. The other stores read the packed history through its exported
// reads (GetPacked, ReadColumns, OfReference), each after their own read of `events`: a pack moves
// events from one to the other in one transaction, so an event missed by the first read is in the
// second, and one seen in both (packed in between) is kept once.
package pagestore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// queryTexts are the statements of pages.sql.
type queryTexts struct {
	GetPacked, UnitRows, PagesOfReference, PackableUnits, TakePackTurn, PackTurnRows, PackedEvents, PackedAttemptSizes, PackedRows, PackedAttempts, LockUnit, MergeUnit, InsertPage, DeletePacked, DeletePackedAttempts string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:pages.sql archiveQueries=archiveTexts:archive.sql

// Store packs the history. Safe for concurrent use; build one per process, on the process's core
// handle.
type Store struct {
	core    *mysql.DB
	db      *sql.DB
	archive Archive // nil: no archive (WithArchive)
	// maxPageBytes is the most bytes of columns a page may have to be moved (0: archiveMaxPageBytes;
	// tests set less).
	maxPageBytes int64
}

// New returns the Store on db.
func New(db *mysql.DB) *Store { return &Store{core: db, db: db.Pool()} }

// columnList is "cF, cF+1, ..." for n columns from first.
func columnList(first, n int) string {
	b := make([]byte, 0, n*6)
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(append(b, 'c'), int64(first+i), 10)
	}
	return string(b)
}

// allColumns is every column of a page row.
var allColumns = columnList(0, pages.Columns)

// pagesQuery is a statement of pages.sql with /*columns*/ written.
func pagesQuery(q, columns string) string {
	return strings.ReplaceAll(q, "/*columns*/", columns)
}

// ReadPageColumns reads n columns of page from first (UnitRows), decoded: the packed events they
// hold.
func ReadColumns(ctx context.Context, q mysql.Conn, page int64, first, n int) ([]pages.Row, error) {
	return DecodeRows(q.QueryContext(ctx, pagesQuery(queries.UnitRows, columnList(first, n)), page))
}

// getPacked reads id's row from its page, if it is packed.
func GetPacked(ctx context.Context, q mysql.Conn, id int64) (pages.Row, bool, error) {
	rows, err := q.QueryContext(ctx, getPackedText(id), pages.PageOf(id))
	if err != nil {
		return pages.Row{}, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var col []byte
		if err := rows.Scan(&col); err != nil {
			return pages.Row{}, false, err
		}
		r, ok, err := pages.Find(col, id)
		if err != nil || ok {
			return r, ok, err
		}
	}
	return pages.Row{}, false, rows.Err()
}

// getPackedText is GetPacked for id: its page's column that holds it, named in the text.
func getPackedText(id int64) string {
	return strings.Replace(queries.GetPacked, "/*column*/", fmt.Sprintf("c%d", pages.ColumnOf(id)), 1)
}

// DecodePageRows decodes every column each row has (rows and err as a query of page columns
// returned them: UnitRows, PagesOfReference, the audit's read of every page).
func DecodeRows(rows *sql.Rows, err error) ([]pages.Row, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pages.Row
	n, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		cols := make([][]byte, len(n))
		dest := make([]any, len(n))
		for i := range cols {
			dest[i] = &cols[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		for _, col := range cols {
			if col == nil {
				continue // a column the statement left out (NULL: PagesOfReference)
			}
			rs, err := pages.Decode(col)
			if err != nil {
				return nil, err
			}
			out = append(out, rs...)
		}
	}
	return out, rows.Err()
}

// referenceQuery is PagesOfReference with its column lists written.
var referenceQuery = func() string {
	// Built with strconv, not fmt: this runs at every function's initialisation.
	found, match := make([]byte, 0, 40*pages.Columns), make([]byte, 0, 24*pages.Columns)
	for c := range pages.Columns {
		var buf [8]byte
		col := strconv.AppendInt(append(buf[:0], 'c'), int64(c), 10)
		if c > 0 {
			found, match = append(found, ", "...), append(match, " OR "...)
		}
		found = append(append(append(append(found, "IF(INSTR("...), col...), ", q.r) > 0, "...), col...)
		found = append(found, ", NULL)"...)
		match = append(append(append(match, "INSTR("...), col...), ", q.r) > 0"...)
	}
	q := strings.Replace(queries.PagesOfReference, "/*found*/", string(found), 1)
	return strings.Replace(q, "/*any*/", string(match), 1)
}()

// OfReference returns the packed tasks of reference ref, whose routing hash is hash (taskstore's
// ReferenceHash), in position order: PagesOfReference, a scan of the packed history.
func OfReference(ctx context.Context, q mysql.Conn, ref string, hash uint32) ([]pages.Row, error) {
	rows, err := DecodeRows(q.QueryContext(ctx, referenceQuery, pages.ReferenceNeedle(ref, hash)))
	if err != nil {
		return nil, err
	}
	rows = slices.DeleteFunc(rows, func(r pages.Row) bool {
		return r.Kind != string(exactlyonce.KindTask) || r.ReferenceID == nil || *r.ReferenceID != ref ||
			r.RoutingHash != hash || r.Position == nil
	})
	slices.SortFunc(rows, func(a, b pages.Row) int { return cmp.Compare(*a.Position, *b.Position) })
	return rows, nil
}
