package mysql

// The packed history (issue 19; migrations/0012_event_pages.sql, sql/pages.sql, internal/pages):
// the sweeper packs folded events out of `events` into page rows of ten thousand ids, a unit of a
// thousand at a time, so that a read of an old event scans one partition of about one page row
// instead of a share of the history. Issue 29 made the pack exact whatever runs beside it (it
// locks what it packs, and packs take turns) and bounded its memory by bytes (packTx).

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
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
	// packRowBytes is the most bytes of events (pages.SizeBound) one page row is written with of a
	// unit; a unit with more takes more rows. It keeps the statement that writes them (escaped by
	// the driver, interpolateParams: a byte is two at worst), 8 MiB and a few KB at worst, under
	// the smallest max_allowed_packet in use (16 MiB, MariaDB's default; Aurora MySQL's is 64 MiB),
	// and each column under MEDIUMBLOB's 16 MiB; and the memory the driver takes for it (it copies
	// the statement twice) to a few times its size. A larger one would give a unit of large tasks
	// fewer rows for more memory (README, "The packed history", says what a row more costs a read).
	packRowBytes = 4 << 20
	// packReadBytes is the most bytes of events (pages.SizeBound) one read of the pack brings in
	// (planReads): with a statement being written, what bounds the pack's memory, whatever its
	// units hold (some 40 MiB measured at most, TestAPackOfLargePayloadsIsBoundedByBytes; a
	// sweeper on Lambda has 256 MB). Each read scans what is left of `settled`, so a transaction
	// of a long backlog (250,000 small events, about 75 MiB by that bound) makes five reads:
	// larger reads would scan less, for more memory.
	packReadBytes = 16 << 20
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
// units behind the id counter's. Safe to run from many processes at once: packs take turns, and
// one that finds the turn taken returns what it has packed (the next call packs the rest); a
// transaction that finds an event folded into its units since it locked theirs rolls back.
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
		if errors.Is(err, errPackBusy) {
			return res, nil // another process is packing: the next maintenance packs the rest
		}
		if errors.Is(err, errPackRace) {
			continue // a late event: these units are looked at again next time
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

// errPackBusy is packTx's when another transaction holds the pack's turn (TakePackTurn).
var errPackBusy = errors.New("pack: another process is packing")

// packStepKey is the context key of WithPackSteps' function.
type packStepKey struct{}

// WithPackSteps returns ctx carrying f: a pack run under it (PackPages) calls f with its
// transaction before each of its statements, named as in sql/pages.sql, and before it commits
// ("Commit"). Only the tests, which hold two packs between the statements of their choice, and
// the chaos run, whose packs dawdle between statements so that they overlap each other's and the
// late creates' in every way, set one.
func WithPackSteps(ctx context.Context, f func(tx *sql.Tx, step string)) context.Context {
	return context.WithValue(ctx, packStepKey{}, f)
}

func packStep(ctx context.Context, tx *sql.Tx, step string) {
	if f, ok := ctx.Value(packStepKey{}).(func(*sql.Tx, string)); ok {
		f(tx, step)
	}
}

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

// heldEvent is an event a pack holds (PackedEvents): its id, whether it is a task, and a bound
// of the bytes it takes in its page (pages.SizeBound), its attempts' included.
type heldEvent struct {
	id   int64
	task bool
	size int64
}

// packRead is what one PackedRows statement brings in: the events of whole units that take at most
// packReadBytes together, or a part of at most packReadBytes of one unit that takes more.
type packRead struct {
	units  []int64
	events []heldEvent // ascending ids
}

// packTx packs the folded events of batch's units in tx, holding at most about packReadBytes of
// them at once, however large the units are. It takes the packs' turn (TakePackTurn), locks the
// events it packs and reads only their ids and sizes (PackedEvents, PackedAttemptSizes); then,
// one read of at most packReadBytes at a time (planReads), it reads their rows and attempts
// (PackedRows, PackedAttempts) and writes them into their pages (writeUnit), in rows of at most
// packRowBytes; last it deletes them (DeletePacked, DeletePackedAttempts), and rolls back unless
// it deleted exactly the events and attempts it holds.
//
// Exact under any interleaving of packs, late events and folds: the events PackedEvents returns
// are locked until the commit, so no other pack deletes or packs one of them meanwhile (the turn
// keeps other packs out besides), and nothing else changes a folded event; DeletePacked therefore
// deletes every one of them, and deleting no more than there are means deleting exactly them.
// More is an event folded into these units since (deleting it would lose it): the pack rolls
// back, and the units are packed again later.
func packTx(ctx context.Context, tx *sql.Tx, batch []int64) (packResult, error) {
	var res packResult
	unitArgs := idArgs(batch)
	ph := placeholders(len(batch))
	packStep(ctx, tx, "TakePackTurn")
	if err := takePackTurn(ctx, tx); err != nil {
		return res, err
	}
	packStep(ctx, tx, "PackedEvents")
	events, err := lockPacked(ctx, tx, strings.Replace(query("PackedEvents"), "/*units*/", ph, 1), unitArgs)
	if err != nil || len(events) == 0 {
		return res, err
	}
	var tasks []int64
	for _, e := range events {
		if e.task {
			tasks = append(tasks, e.id)
		}
	}
	packStep(ctx, tx, "PackedAttemptSizes")
	attemptSizes, attemptCount, err := readAttemptSizes(ctx, tx, tasks)
	if err != nil {
		return res, err
	}
	for i := range events {
		events[i].size += attemptSizes[events[i].id]
	}
	started := map[int64]bool{} // units of which a first part is written: the next parts are rows of their own
	var attemptsRead int64
	for _, r := range planReads(events) {
		rows, err := readPacked(ctx, tx, r)
		if err != nil {
			return res, err
		}
		var readTasks []int64
		for _, row := range rows {
			if row.Kind == string(exactlyonce.KindTask) {
				readTasks = append(readTasks, row.ID)
			}
		}
		attempts, err := readPackedAttempts(ctx, tx, readTasks)
		if err != nil {
			return res, err
		}
		for i := range rows {
			rows[i].TaskAttempts = attempts[rows[i].ID]
			attemptsRead += int64(len(rows[i].TaskAttempts))
		}
		// The rows come in id order (PackedRows), so a unit's are a run of them.
		for len(rows) > 0 {
			unit := pages.UnitOf(rows[0].ID)
			n := 1
			for n < len(rows) && pages.UnitOf(rows[n].ID) == unit {
				n++
			}
			for _, chunk := range chunkBySize(rows[:n]) {
				if err := writeUnit(ctx, tx, unit, chunk, !started[unit]); err != nil {
					return res, err
				}
				started[unit] = true
			}
			rows = rows[n:]
		}
	}
	if attemptsRead != attemptCount {
		return res, fmt.Errorf("pack: counted %d attempts of the tasks it holds, read %d", attemptCount, attemptsRead)
	}
	packStep(ctx, tx, "DeletePacked")
	del, err := tx.ExecContext(ctx, strings.Replace(query("DeletePacked"), "/*units*/", ph, 1), unitArgs...)
	if err != nil {
		return res, err
	}
	if n, err := del.RowsAffected(); err != nil {
		return res, err
	} else if n != int64(len(events)) {
		return res, fmt.Errorf("%w: holds %d events, deleting %d", errPackRace, len(events), n)
	}
	var deleted int64
	for chunk := range slices.Chunk(tasks, packIDsPerStatement) {
		q, args := expandIDs(query("DeletePackedAttempts"), chunk)
		packStep(ctx, tx, "DeletePackedAttempts")
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
	if deleted != attemptCount {
		return res, fmt.Errorf("%w: read %d attempts, deleting %d", errPackRace, attemptCount, deleted)
	}
	res.Units, res.Events = int64(len(started)), int64(len(events))
	packStep(ctx, tx, "Commit")
	return res, nil
}

// lockPacked runs PackedEvents: the events of the units a pack takes, locked, with the bound of
// what each takes in its page (without its attempts).
func lockPacked(ctx context.Context, tx *sql.Tx, q string, args []any) ([]heldEvent, error) {
	rs, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []heldEvent
	for rs.Next() {
		var e heldEvent
		var kind string
		if err := rs.Scan(&e.id, &kind, &e.size); err != nil {
			return nil, err
		}
		e.task = kind == string(exactlyonce.KindTask)
		e.size += pages.RecordOverhead
		out = append(out, e)
	}
	return out, rs.Err()
}

// takePackTurn takes the pack's turn (TakePackTurn) for tx, or says errPackBusy when another
// transaction holds it.
func takePackTurn(ctx context.Context, tx *sql.Tx) error {
	var turn int64
	err := tx.QueryRowContext(ctx, query("TakePackTurn")).Scan(&turn)
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var rows int
	if err := tx.QueryRowContext(ctx, query("PackTurnRows")).Scan(&rows); err != nil {
		return err
	}
	if rows == 0 {
		return errors.New("pack: pack_turn has no row (migration 0014): insert it again, INSERT INTO pack_turn (turn) VALUES (0)")
	}
	return errPackBusy
}

// readAttemptSizes runs PackedAttemptSizes: for each task, a bound of what its attempts take in
// its record; and how many attempts the tasks have in all.
func readAttemptSizes(ctx context.Context, tx *sql.Tx, tasks []int64) (map[int64]int64, int64, error) {
	out := map[int64]int64{}
	var count int64
	for chunk := range slices.Chunk(tasks, packIDsPerStatement) {
		q, args := expandIDs(query("PackedAttemptSizes"), chunk)
		rs, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, 0, err
		}
		for rs.Next() {
			var id, n, bytes int64
			if err := rs.Scan(&id, &n, &bytes); err != nil {
				rs.Close()
				return nil, 0, err
			}
			out[id] = n*pages.AttemptOverhead + bytes
			count += n
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, 0, err
		}
	}
	return out, count, nil
}

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
				q := strings.Replace(query("MergeUnit"), "/*sets*/", strings.Join(sets, ", "), 1)
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
	q := strings.Replace(pagesQuery("InsertPage", allColumns), "/*rows*/", "("+placeholders(2+pages.Columns)+")", 1)
	packStep(ctx, tx, "InsertPage")
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// lockUnit locks the rows of a page and returns the unit's columns of the first, or nil when the
// page has no row yet. It keeps only the first row's: a unit too large for one row has more, which
// it reads through the driver's buffer one at a time.
func lockUnit(ctx context.Context, tx *sql.Tx, page int64, columns string) ([][]byte, error) {
	rows, err := tx.QueryContext(ctx, pagesQuery("LockUnit", columns), page)
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
	args := append([]any{r.events[0].id, r.events[len(r.events)-1].id}, idArgs(r.units)...)
	packStep(ctx, tx, "PackedRows")
	rs, err := tx.QueryContext(ctx, strings.Replace(query("PackedRows"), "/*units*/", placeholders(len(r.units)), 1), args...)
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
