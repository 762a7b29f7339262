package pagestore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// planReads splits the events a pack holds into reads of at most packReadBytes (by their bounds):
// units that fit are read whole, several in one read while they fit together, so that the
// transaction scans `settled` few times; a unit that takes more is read in parts of at most
// packReadBytes. (A single event over packReadBytes, which the API's limits make impossible, would
// be a read of its own.)
func planReads(events []heldEvent) []packRead {
	slices.SortFunc(events, func(a, b heldEvent) int { return cmp.Compare(a.id, b.id) })
	var out []packRead
	var cur packRead
	var curSize int64
	flush := func() {
		if len(cur.events) > 0 {
			out = append(out, cur)
		}
		cur, curSize = packRead{}, 0
	}
	for start := 0; start < len(events); {
		unit := pages.UnitOf(events[start].id)
		end, size := start, int64(0)
		for ; end < len(events) && pages.UnitOf(events[end].id) == unit; end++ {
			size += events[end].size
		}
		if size <= packReadBytes {
			if curSize+size > packReadBytes {
				flush()
			}
			cur.units = append(cur.units, unit)
			cur.events = append(cur.events, events[start:end]...)
			curSize += size
			start = end
			continue
		}
		// A large unit: cut into its rows' worth (of packRowBytes, as chunkBySize cuts them), and
		// as many whole rows to a read as it holds, so that no row is cut short at a read's end.
		flush()
		cuts := []int{} // where in events the unit's rows start, and its end
		var rowSize int64
		for k := start; k < end; k++ {
			if k == start || rowSize+events[k].size > packRowBytes {
				cuts, rowSize = append(cuts, k), 0
			}
			rowSize += events[k].size
		}
		cuts = append(cuts, end)
		read, readSize := packRead{units: []int64{unit}}, int64(0)
		for r := 0; r+1 < len(cuts); r++ {
			row := events[cuts[r]:cuts[r+1]]
			var size int64
			for _, e := range row {
				size += e.size
			}
			if len(read.events) > 0 && readSize+size > packReadBytes {
				out = append(out, read)
				read, readSize = packRead{units: []int64{unit}}, 0
			}
			read.events = append(read.events, row...)
			readSize += size
		}
		out = append(out, read)
		start = end
	}
	flush()
	return out
}

// writeUnit writes one unit's rows into its page. The first part of a unit (merge) goes into the
// page's row, merged with what the unit already holds there (nothing, or events packed before:
// late ones), unless the result would pass packRowBytes; otherwise, and for the next parts of a
// unit too large for one row, it is a new row of the page. It clears rows once it has encoded
// them, so that their payloads are not held while the driver copies the statement.
func writeUnit(ctx context.Context, tx *sql.Tx, unit int64, rows []pages.Row, merge bool) error {
	page, first := pages.UnitPage(unit), pages.FirstColumn(unit)
	columns := columnList(first, pages.UnitColumns)
	if merge {
		packStep(ctx, tx, "LockUnit")
		was, err := lockUnit(ctx, tx, page, columns)
		if err != nil {
			return err
		}
		if was != nil {
			var packed []pages.Row
			there := map[int64]bool{}
			for _, c := range was {
				rs, err := pages.Decode(c)
				if err != nil {
					return err
				}
				for _, r := range rs {
					there[r.ID] = true
				}
				packed = append(packed, rs...)
			}
			for _, r := range rows {
				if there[r.ID] {
					// Never, while the pack holds its events' locks (PackedEvents): kept as a
					// last guard, which rolls back rather than store an event twice.
					return fmt.Errorf("%w: event %d is packed already", errPackRace, r.ID)
				}
			}
			if all := append(packed, rows...); len(chunkBySize(all)) == 1 {
				_, cols, err := pages.Encode(all)
				if err != nil {
					return err
				}
				args := []any{len(rows)}
				clear(all)
				clear(rows)
				sets := make([]string, pages.UnitColumns)
				same := make([]string, pages.UnitColumns)
				for i, c := range cols {
					sets[i] = fmt.Sprintf("c%d = ?", first+i)
					args = append(args, c)
				}
				args = append(args, page)
				for i, c := range was {
					same[i] = fmt.Sprintf("LENGTH(c%d) = ? AND SHA2(c%d, 256) = ?", first+i, first+i)
					sum := sha256.Sum256(c)
					args = append(args, len(c), hex.EncodeToString(sum[:]))
				}
				q := strings.Replace(queries.MergeUnit, "/*sets*/", strings.Join(sets, ", "), 1)
				q = strings.Replace(q, "/*was*/", strings.Join(same, " AND "), 1)
				packStep(ctx, tx, "MergeUnit")
				r, err := tx.ExecContext(ctx, q, args...)
				if err != nil {
					return err
				}
				if n, err := r.RowsAffected(); err != nil {
					return err
				} else if n != 1 {
					return fmt.Errorf("%w: page %d's row changed under its lock", errPackRace, page)
				}
				return nil
			}
		}
	}
	_, cols, err := pages.Encode(rows)
	if err != nil {
		return err
	}
	args := make([]any, 0, 2+pages.Columns)
	args = append(args, page, len(rows))
	clear(rows)
	for c := range pages.Columns {
		if c >= first && c < first+pages.UnitColumns {
			args = append(args, cols[c-first])
		} else {
			args = append(args, pages.Empty())
		}
	}
	q := strings.Replace(pagesQuery(queries.InsertPage, allColumns), "/*rows*/", "("+mysql.Placeholders(2+pages.Columns)+")", 1)
	packStep(ctx, tx, "InsertPage")
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// lockUnit locks the rows of a page and returns the unit's columns of the first, or nil when the
// page has no row yet. It keeps only the first row's: a unit too large for one row has more, which
// it reads through the driver's buffer one at a time.
func lockUnit(ctx context.Context, tx *sql.Tx, page int64, columns string) ([][]byte, error) {
	rows, err := tx.QueryContext(ctx, pagesQuery(queries.LockUnit, columns), page)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var first [][]byte
	raw := make([]sql.RawBytes, pages.UnitColumns)
	dest := make([]any, len(raw))
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if first == nil {
			first = make([][]byte, len(raw))
			for i, c := range raw {
				first[i] = bytes.Clone(c)
			}
		}
	}
	return first, rows.Err()
}

// chunkBySize splits a unit's rows so that each page row written of them holds at most
// packRowBytes (by pages.SizeBound).
func chunkBySize(rows []pages.Row) [][]pages.Row {
	var out [][]pages.Row
	start, size := 0, int64(0)
	for i, r := range rows {
		n := int64(pages.SizeBound(r))
		if i > start && size+n > packRowBytes {
			out = append(out, rows[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(rows) {
		out = append(out, rows[start:])
	}
	return out
}

// readPacked runs PackedRows for one read: the rows of its events, in any order. An event of its
// units the pack does not hold (folded since PackedEvents, or held by another pack, which
// PackedEvents skipped) is passed over without its payload being copied.
func readPacked(ctx context.Context, tx *sql.Tx, r packRead) ([]pages.Row, error) {
	want := make(map[int64]bool, len(r.events))
	for _, e := range r.events {
		want[e.id] = true
	}
	args := append([]any{r.events[0].id, r.events[len(r.events)-1].id}, mysql.IDArgs(r.units)...)
	packStep(ctx, tx, "PackedRows")
	rs, err := tx.QueryContext(ctx, strings.Replace(queries.PackedRows, "/*units*/", mysql.Placeholders(len(r.units)), 1), args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := make([]pages.Row, 0, len(r.events))
	for rs.Next() {
		var (
			r                        pages.Row
			value, by, lastErr, url  sql.NullString
			ref, claim, worker       sql.NullString
			processedAt, nextAttempt sql.NullTime
			maxRetries, position     sql.NullInt64
			payload                  sql.RawBytes
		)
		if err := rs.Scan(&r.ID, &r.RoutingHash, &r.Kind, &r.State, &value, &r.CreatedAt, &processedAt, &by, &r.ProcessCount,
			&r.Attempts, &lastErr, &nextAttempt, &url, &payload, &ref, &maxRetries, &position, &claim, &worker); err != nil {
			return nil, err
		}
		if !want[r.ID] {
			continue
		}
		delete(want, r.ID)
		r.Payload = bytes.Clone(payload) // nil stays nil: NULL
		r.Value, r.ProcessedBy, r.LastError, r.URL = strPtr(value), strPtr(by), strPtr(lastErr), strPtr(url)
		r.ReferenceID, r.ClaimID, r.WorkerID = strPtr(ref), strPtr(claim), strPtr(worker)
		r.ProcessedAt, r.NextAttemptAt = timePtr(processedAt), timePtr(nextAttempt)
		r.MaxRetries, r.Position = intPtr(maxRetries), intPtr(position)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("pack: %d of the events it holds were not read back", len(want))
	}
	return out, nil
}

// readPackedAttempts reads the attempts of the tasks being packed, by task.
func readPackedAttempts(ctx context.Context, tx *sql.Tx, tasks []int64) (map[int64][]pages.Attempt, error) {
	out := map[int64][]pages.Attempt{}
	for chunk := range slices.Chunk(tasks, packIDsPerStatement) {
		q, args := mysql.ExpandIDs(queries.PackedAttempts, chunk)
		rs, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		for rs.Next() {
			var id int64
			var a pages.Attempt
			var e sql.NullString
			if err := rs.Scan(&id, &a.Number, &a.StartedAt, &a.DurationUS, &a.Status, &e, &a.ClaimID); err != nil {
				rs.Close()
				return nil, err
			}
			a.Error = strPtr(e)
			out[id] = append(out[id], a)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, err
		}
	}
	for _, as := range out {
		slices.SortFunc(as, func(a, b pages.Attempt) int {
			if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
				return c
			}
			return int(a.Number - b.Number)
		})
	}
	return out, nil
}

func strPtr(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

func intPtr(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}
