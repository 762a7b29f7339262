package mysql

// The packed history (issue 19; migrations/0012_event_pages.sql, sql/pages.sql, internal/pages):
// the sweeper packs folded events out of `events` into page rows of ten thousand ids, a unit of a
// thousand at a time, so that a read of an old event scans one partition of about one page row
// instead of a share of the history.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

const (
	// packTxUnits is the most units one pack transaction moves: up to 10,000 events, some tens of
	// milliseconds of deletes, and statements that name units, not ids.
	packTxUnits = 10
	// packTxUnitsBacklog is the most units a transaction moves when many are waiting: 250,000
	// events, a few seconds.
	packTxUnitsBacklog = 250
	// packRowBytes is the most one statement writes of a unit before the pack starts another row
	// of the page: far below max_allowed_packet (16 MB on MariaDB, 64 MB on Aurora MySQL) and
	// MEDIUMBLOB's 16 MB.
	packRowBytes = 4 << 20
	// packIDsPerStatement keeps the attempts' statements short (RDS Proxy pins the session of a
	// statement over 16 KB).
	packIDsPerStatement = 500
	// packLag is how many units behind the id counter's unit the pack stays: a create takes its id
	// before it inserts its event, so the newest units may still get events; a unit packed too
	// early is not wrong (a late event is merged into it), only more work.
	packLag = 2
)

// columnList is "cF, cF+1, ..." for n columns from first.
func columnList(first, n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", first+i)
	}
	return strings.Join(names, ", ")
}

// allColumns is every column of a page row.
var allColumns = columnList(0, pages.Columns)

// pagesQuery is a statement of sql/pages.sql with /*columns*/ written.
func pagesQuery(name, columns string) string {
	return strings.ReplaceAll(query(name), "/*columns*/", columns)
}

// getPacked reads id's row from its page, if it is packed.
func getPacked(ctx context.Context, q txConn, id int64) (pages.Row, bool, error) {
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
	return strings.Replace(query("GetPacked"), "/*column*/", fmt.Sprintf("c%d", pages.ColumnOf(id)), 1)
}

// packedEvent is the event a packed row is, as Get returns it.
func packedEvent(r pages.Row) exactlyonce.Event {
	e := exactlyonce.Event{ID: r.ID, Kind: exactlyonce.Kind(r.Kind), Value: r.Value, State: storedState(exactlyonce.State(r.State)),
		CreatedAt: r.CreatedAt, ProcessedAt: r.ProcessedAt, ProcessCount: int(r.ProcessCount), Attempts: int(r.Attempts)}
	if r.ProcessedBy != nil {
		e.ProcessedBy = *r.ProcessedBy
	}
	if r.LastError != nil {
		e.LastError = *r.LastError
	}
	t := taskColumns{payload: r.Payload, hash: r.RoutingHash}
	t.url = nullString(r.URL)
	t.reference = nullString(r.ReferenceID)
	t.worker = nullString(r.WorkerID)
	if r.MaxRetries != nil {
		t.maxRetries = sql.NullInt64{Int64: *r.MaxRetries, Valid: true}
	}
	if r.Position != nil {
		t.position = sql.NullInt64{Int64: *r.Position, Valid: true}
	}
	e.Task = t.task(e.Kind)
	return e
}

func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}

// decodePageRows decodes every column each row has (UnitRows, PagesOfReference, AuditPages).
func decodePageRows(rows *sql.Rows, err error) ([]pages.Row, error) {
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

// packResult is what a pack did.
type packResult struct {
	Units, Events int64
}

// PackPages packs up to maxUnits units (a thousand ids each) of folded events into event_pages, and
// says how many units and events it packed. It starts no transaction after budget has passed (but
// always one), and starts at a random one of the units it can pack, so that sweepers packing at
// once mostly take different units. A unit is packed when every event of
// its ids still in `events` (but the failed ones, which stay) is folded, and it is at least packLag
// units behind the id counter's. Safe to run from many processes at once: a transaction that finds
// its units changed under it (another pack took them, or an event settled into them) rolls back.
func (s *Store) PackPages(ctx context.Context, maxUnits int, budget time.Duration) (packedUnits, packedEvents int64, err error) {
	if maxUnits < 1 {
		return 0, 0, fmt.Errorf("pack pages: maxUnits %d; want at least 1", maxUnits)
	}
	res, err := s.packUnits(ctx, maxUnits, time.Now().Add(budget))
	return res.Units, res.Events, err
}

func (s *Store) packUnits(ctx context.Context, maxUnits int, stop time.Time) (packResult, error) {
	var res packResult
	candidates, err := s.packableUnits(ctx)
	if err != nil {
		return res, interpret("pack pages", err)
	}
	if len(candidates) > 1 {
		k := rand.IntN(len(candidates))
		candidates = append(candidates[k:], candidates[:k]...)
	}
	if len(candidates) > maxUnits {
		candidates = candidates[:maxUnits]
	}
	// A backlog (a history packed for the first time, after migration 0012) goes in larger
	// transactions: each one scans what is left of the `settled` partition twice, so fewer
	// transactions scan less in all.
	txUnits := min(max(len(candidates)/4, packTxUnits), packTxUnitsBacklog)
	for first := true; len(candidates) > 0 && ctx.Err() == nil && (first || time.Now().Before(stop)); first = false {
		batch := slices.Clone(candidates[:min(txUnits, len(candidates))])
		candidates = candidates[len(batch):]
		slices.Sort(batch) // pages are locked in ascending order by every pack
		var got packResult
		err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
			var err error
			got, err = packTx(ctx, tx, batch)
			return err
		})
		if errors.Is(err, errPackRace) {
			continue // another pack, or a late event: these units are looked at again next time
		}
		if err != nil {
			return res, interpret("pack pages", err)
		}
		res.Units += got.Units
		res.Events += got.Events
	}
	return res, nil
}

var errPackRace = errors.New("pack: the units changed while they were packed")

// packableUnits returns the units that can be packed, ascending.
func (s *Store) packableUnits(ctx context.Context) ([]int64, error) {
	var counter int64
	if err := s.db.QueryRowContext(ctx, query("ReadCounter")).Scan(&counter); err != nil {
		return nil, err
	}
	limit := pages.UnitOf(counter) - packLag
	rows, err := s.db.QueryContext(ctx, query("PackableUnits"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var unit int64
		var unfolded bool
		if err := rows.Scan(&unit, &unfolded); err != nil {
			return nil, err
		}
		if !unfolded && unit <= limit {
			out = append(out, unit)
		}
	}
	slices.Sort(out)
	return out, rows.Err()
}

// packTx packs the folded events of batch's units in tx.
func packTx(ctx context.Context, tx *sql.Tx, batch []int64) (packResult, error) {
	var res packResult
	unitArgs := idArgs(batch)
	ph := placeholders(len(batch))
	rows, err := readPacked(ctx, tx, strings.Replace(query("PackedRows"), "/*units*/", ph, 1), unitArgs)
	if err != nil || len(rows) == 0 {
		return res, err
	}
	var tasks []int64
	for _, r := range rows {
		if r.Kind == string(exactlyonce.KindTask) {
			tasks = append(tasks, r.ID)
		}
	}
	attempts, err := readPackedAttempts(ctx, tx, tasks)
	if err != nil {
		return res, err
	}
	byUnit := map[int64][]pages.Row{}
	for _, r := range rows {
		r.TaskAttempts = attempts[r.ID]
		byUnit[pages.UnitOf(r.ID)] = append(byUnit[pages.UnitOf(r.ID)], r)
	}
	for _, unit := range batch {
		for i, chunk := range chunkBySize(byUnit[unit]) {
			if err := writeUnit(ctx, tx, unit, chunk, i == 0); err != nil {
				return res, err
			}
		}
		if len(byUnit[unit]) > 0 {
			res.Units++
		}
	}
	del, err := tx.ExecContext(ctx, strings.Replace(query("DeletePacked"), "/*units*/", ph, 1), unitArgs...)
	if err != nil {
		return res, err
	}
	if n, err := del.RowsAffected(); err != nil {
		return res, err
	} else if n != int64(len(rows)) {
		return res, fmt.Errorf("%w: read %d events, deleting %d", errPackRace, len(rows), n)
	}
	var packedAttempts int64
	for _, as := range attempts {
		packedAttempts += int64(len(as))
	}
	var deleted int64
	for chunk := range slices.Chunk(tasks, packIDsPerStatement) {
		q, args := expandIDs(query("DeletePackedAttempts"), chunk)
		r, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return res, err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return res, err
		}
		deleted += n
	}
	if deleted != packedAttempts {
		return res, fmt.Errorf("%w: read %d attempts, deleting %d", errPackRace, packedAttempts, deleted)
	}
	res.Events = int64(len(rows))
	return res, nil
}

// writeUnit writes one unit's rows into its page. The first chunk of a unit (merge) goes into the
// page's row, merged with what the unit already holds there (nothing, or events packed before:
// late ones), unless the result would pass packRowBytes; otherwise, and for the next chunks of a
// unit too large for one statement, it is a new row of the page.
func writeUnit(ctx context.Context, tx *sql.Tx, unit int64, rows []pages.Row, merge bool) error {
	page, first := pages.UnitPage(unit), pages.FirstColumn(unit)
	columns := columnList(first, pages.UnitColumns)
	if merge {
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
					// Another pack packed these events since this one read them (it waited for that
					// pack's lock): roll back, as DeletePacked's count would.
					return fmt.Errorf("%w: event %d is packed already", errPackRace, r.ID)
				}
			}
			if all := append(packed, rows...); len(chunkBySize(all)) == 1 {
				_, cols, err := pages.Encode(all)
				if err != nil {
					return err
				}
				sets := make([]string, pages.UnitColumns)
				same := make([]string, pages.UnitColumns)
				args := []any{len(rows)}
				for i, c := range cols {
					sets[i] = fmt.Sprintf("c%d = ?", first+i)
					same[i] = fmt.Sprintf("c%d = ?", first+i)
					args = append(args, c)
				}
				args = append(args, page)
				for _, c := range was {
					args = append(args, c)
				}
				q := strings.Replace(query("MergeUnit"), "/*sets*/", strings.Join(sets, ", "), 1)
				q = strings.Replace(q, "/*was*/", strings.Join(same, " AND "), 1)
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
	for c := range pages.Columns {
		if c >= first && c < first+pages.UnitColumns {
			args = append(args, cols[c-first])
		} else {
			args = append(args, pages.Empty())
		}
	}
	q := strings.Replace(pagesQuery("InsertPage", allColumns), "/*rows*/", "("+placeholders(2+pages.Columns)+")", 1)
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// lockUnit locks the rows of a page and returns the unit's columns of the first, or nil when the
// page has no row yet.
func lockUnit(ctx context.Context, tx *sql.Tx, page int64, columns string) ([][]byte, error) {
	rows, err := tx.QueryContext(ctx, pagesQuery("LockUnit", columns), page)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var first [][]byte
	for rows.Next() {
		cols := make([][]byte, pages.UnitColumns)
		dest := make([]any, len(cols))
		for i := range cols {
			dest[i] = &cols[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if first == nil {
			first = cols
		}
	}
	return first, rows.Err()
}

// chunkBySize splits a unit's rows so that each statement that writes them stays under packRowBytes.
func chunkBySize(rows []pages.Row) [][]pages.Row {
	var out [][]pages.Row
	start, size := 0, 0
	for i, r := range rows {
		n := 128 + len(r.Payload)
		for _, s := range []*string{r.Value, r.URL, r.LastError, r.ReferenceID, r.ProcessedBy, r.ClaimID, r.WorkerID} {
			if s != nil {
				n += len(*s)
			}
		}
		for _, a := range r.TaskAttempts {
			n += 64 + len(a.ClaimID)
			if a.Error != nil {
				n += len(*a.Error)
			}
		}
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

// readPacked reads PackedRows.
func readPacked(ctx context.Context, tx *sql.Tx, q string, args []any) ([]pages.Row, error) {
	rs, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []pages.Row
	for rs.Next() {
		var (
			r                        pages.Row
			value, by, lastErr, url  sql.NullString
			ref, claim, worker       sql.NullString
			processedAt, nextAttempt sql.NullTime
			maxRetries, position     sql.NullInt64
		)
		if err := rs.Scan(&r.ID, &r.RoutingHash, &r.Kind, &r.State, &value, &r.CreatedAt, &processedAt, &by, &r.ProcessCount,
			&r.Attempts, &lastErr, &nextAttempt, &url, &r.Payload, &ref, &maxRetries, &position, &claim, &worker); err != nil {
			return nil, err
		}
		r.Value, r.ProcessedBy, r.LastError, r.URL = strPtr(value), strPtr(by), strPtr(lastErr), strPtr(url)
		r.ReferenceID, r.ClaimID, r.WorkerID = strPtr(ref), strPtr(claim), strPtr(worker)
		r.ProcessedAt, r.NextAttemptAt = timePtr(processedAt), timePtr(nextAttempt)
		r.MaxRetries, r.Position = intPtr(maxRetries), intPtr(position)
		out = append(out, r)
	}
	return out, rs.Err()
}

// readPackedAttempts reads the attempts of the tasks being packed, by task.
func readPackedAttempts(ctx context.Context, tx *sql.Tx, tasks []int64) (map[int64][]pages.Attempt, error) {
	out := map[int64][]pages.Attempt{}
	for chunk := range slices.Chunk(tasks, packIDsPerStatement) {
		q, args := expandIDs(query("PackedAttempts"), chunk)
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
