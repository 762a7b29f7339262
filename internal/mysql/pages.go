package mysql

// The packed history (issue 19; migrations/0012_event_pages.sql, sql/pages.sql, internal/pages):
// the sweeper packs folded events out of `events` into page rows of a thousand ids, so that a read
// of an old event scans one partition of about ten page rows instead of a share of the history.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

const (
	// packTxPages is the most pages one pack transaction moves: up to 10,000 events, some tens of
	// milliseconds of deletes, and statements that name pages, not ids.
	packTxPages = 10
	// packTxPagesBacklog is the most pages a transaction moves when many are waiting: 250,000
	// events, a few seconds.
	packTxPagesBacklog = 250
	// packRowBytes is the most a page row holds before the pack starts another row of the page:
	// far below max_allowed_packet (16 MB on MariaDB, 64 MB on Aurora MySQL) and MEDIUMBLOB's 16 MB.
	packRowBytes = 4 << 20
	// packIDsPerStatement keeps the attempts' statements short (RDS Proxy pins the session of a
	// statement over 16 KB).
	packIDsPerStatement = 500
	// packLag is how many pages behind the id counter's page the pack stays: a create takes its id
	// before it inserts its event, so the newest pages may still get events; a page packed too early
	// is not wrong (a late event gets a row of its own), only less tidy.
	packLag = 2
)

// queryRower is a *sql.DB or a *sql.Tx.
type queryRower interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// getPacked reads id's row from its page, if it is packed.
func getPacked(ctx context.Context, q queryRower, id int64) (pages.Row, bool, error) {
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

// decodePageRow decodes every column of a page row (PageRows, PagesOfReference, AuditPages).
func decodePageRows(rows *sql.Rows, err error) ([]pages.Row, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pages.Row
	for rows.Next() {
		var cols [pages.Columns][]byte
		dest := make([]any, pages.Columns)
		for i := range cols {
			dest[i] = &cols[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		for _, col := range cols {
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
	Pages, Events, Rows int64
}

// PackPages packs up to maxPages pages of folded events into event_pages, packTxPages pages a
// transaction, lowest pages first, and says what it packed. A page is packed when every event of
// its ids still in `events` (but the failed ones, which stay) is folded, and it is at least packLag
// pages behind the id counter. Safe to run from many processes at once: a transaction that finds
// its pages changed under it (another pack took them, or an event settled into them) rolls back.
// It returns how many pages and events it packed.
func (s *Store) PackPages(ctx context.Context, maxPages int) (packedPages, packedEvents int64, err error) {
	if maxPages < 1 {
		return 0, 0, fmt.Errorf("pack pages: maxPages %d; want at least 1", maxPages)
	}
	res, err := s.packPages(ctx, maxPages)
	return res.Pages, res.Events, err
}

func (s *Store) packPages(ctx context.Context, maxPages int) (packResult, error) {
	var res packResult
	candidates, err := s.packablePages(ctx)
	if err != nil {
		return res, interpret("pack pages", err)
	}
	if len(candidates) > maxPages {
		candidates = candidates[:maxPages]
	}
	// A backlog (a history packed for the first time, after migration 0012) goes in larger
	// transactions: each one scans what is left of the `settled` partition twice, so fewer
	// transactions scan less in all.
	txPages := min(max(len(candidates)/4, packTxPages), packTxPagesBacklog)
	for len(candidates) > 0 && ctx.Err() == nil {
		batch := candidates[:min(txPages, len(candidates))]
		candidates = candidates[len(batch):]
		var got packResult
		err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
			var err error
			got, err = packTx(ctx, tx, batch)
			return err
		})
		if errors.Is(err, errPackRace) {
			continue // another pack, or a late event: these pages are looked at again next time
		}
		if err != nil {
			return res, interpret("pack pages", err)
		}
		res.Pages += got.Pages
		res.Events += got.Events
		res.Rows += got.Rows
	}
	return res, nil
}

var errPackRace = errors.New("pack: the pages changed while they were packed")

// packablePages returns the pages that can be packed, ascending.
func (s *Store) packablePages(ctx context.Context) ([]int64, error) {
	var counter int64
	if err := s.db.QueryRowContext(ctx, query("ReadCounter")).Scan(&counter); err != nil {
		return nil, err
	}
	limit := pages.PageOf(counter) - packLag
	rows, err := s.db.QueryContext(ctx, query("PackablePages"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var page int64
		var unfolded bool
		if err := rows.Scan(&page, &unfolded); err != nil {
			return nil, err
		}
		if !unfolded && page <= limit {
			out = append(out, page)
		}
	}
	slices.Sort(out)
	return out, rows.Err()
}

// packTx packs the folded events of batch's pages in tx.
func packTx(ctx context.Context, tx *sql.Tx, batch []int64) (packResult, error) {
	var res packResult
	pageArgs := idArgs(batch)
	ph := placeholders(len(batch))
	rows, err := readPacked(ctx, tx, strings.Replace(query("PackedRows"), "/*pages*/", ph, 1), pageArgs)
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
	byPage := map[int64][]pages.Row{}
	for _, r := range rows {
		r.TaskAttempts = attempts[r.ID]
		byPage[pages.PageOf(r.ID)] = append(byPage[pages.PageOf(r.ID)], r)
	}
	var insert []any
	var insertRows, insertBytes int
	flush := func() error {
		if insertRows == 0 {
			return nil
		}
		row := "(" + placeholders(2+pages.Columns) + ")"
		q := strings.Replace(query("InsertPages"), "/*rows*/", strings.TrimSuffix(strings.Repeat(row+", ", insertRows), ", "), 1)
		_, err := tx.ExecContext(ctx, q, insert...)
		insert, insertRows, insertBytes = nil, 0, 0
		return err
	}
	for _, page := range batch {
		for _, chunk := range chunkBySize(byPage[page]) {
			_, cols, err := pages.Encode(chunk)
			if err != nil {
				return res, err
			}
			insert = append(insert, page, len(chunk))
			for _, c := range cols {
				insert = append(insert, c)
				insertBytes += len(c)
			}
			insertRows++
			res.Rows++
			if insertBytes >= packRowBytes {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
		if len(byPage[page]) > 0 {
			res.Pages++
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	del, err := tx.ExecContext(ctx, strings.Replace(query("DeletePacked"), "/*pages*/", ph, 1), pageArgs...)
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

// chunkBySize splits a page's rows so that each page row stays under packRowBytes.
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
