package pagestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
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
		return res, mysql.Interpret("pack pages", err)
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
		err := s.core.InTx(ctx, func(tx *sql.Tx) error {
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
			return res, mysql.Interpret("pack pages", err)
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
// transaction before each of its statements, named as in pages.sql, and before it commits
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
	counter, err := s.core.ReadIDCounter(ctx)
	if err != nil {
		return nil, err
	}
	limit := pages.UnitOf(counter) - packLag
	rows, err := s.db.QueryContext(ctx, queries.PackableUnits)
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
	unitArgs := mysql.IDArgs(batch)
	ph := mysql.Placeholders(len(batch))
	packStep(ctx, tx, "TakePackTurn")
	if err := takePackTurn(ctx, tx); err != nil {
		return res, err
	}
	packStep(ctx, tx, "PackedEvents")
	events, err := lockPacked(ctx, tx, strings.Replace(queries.PackedEvents, "/*units*/", ph, 1), unitArgs)
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
	// A unit written into a page the archive's move has passed (a late event of a page moved
	// already): the next move starts there (archive.sql). Under the turn, which the move's delete
	// takes too.
	if len(started) > 0 {
		lowest := int64(math.MaxInt64)
		for u := range started {
			lowest = min(lowest, pages.UnitPage(u))
		}
		packStep(ctx, tx, "LowerArchiveCursor")
		if _, err := tx.ExecContext(ctx, archiveQueries.LowerArchiveCursor, lowest, lowest); err != nil {
			return res, err
		}
	}
	packStep(ctx, tx, "DeletePacked")
	del, err := tx.ExecContext(ctx, strings.Replace(queries.DeletePacked, "/*units*/", ph, 1), unitArgs...)
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
		q, args := mysql.ExpandIDs(queries.DeletePackedAttempts, chunk)
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
	err := tx.QueryRowContext(ctx, queries.TakePackTurn).Scan(&turn)
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var rows int
	if err := tx.QueryRowContext(ctx, queries.PackTurnRows).Scan(&rows); err != nil {
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
		q, args := mysql.ExpandIDs(queries.PackedAttemptSizes, chunk)
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
