package eventstore

// Reading what a claim locked: the claimed rows' columns as events, and a claimed task's own
// columns, scanned into raw buffers and decoded only where needed (the drain's hot path).

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// ScanLeasedEvents reads the rows of a statement that returns the claim's columns (ClaimIDs'), as
// events leased, processing: taskstore's LeasedTasks, the tasks a settlement promoted and leased.
func ScanLeasedEvents(rows *sql.Rows, err error) ([]exactlyonce.Event, error) {
	return scanClaimed(rows, err, 0)
}

// scanClaimed reads the rows a claim locked (or a settlement leased) as events, processing, with
// their failed attempts so far and, for a task, its webhook and its place in its reference. The
// columns are id, kind, attempts, then the task's: url, payload, reference_id, max_retries,
// routing_hash, position, worker_id, retry_base. It scans into reused raw buffers and decodes the
// task's columns only for a task: the drain claims hundreds of plain events a statement, whose
// eight task columns are NULL or unused, and typed scans of them (sql.Null*, a conversion and often
// an allocation each) were about a third of the claim's Go time per event.
func scanClaimed(rows *sql.Rows, err error, most int) ([]exactlyonce.Event, error) {
	return scanClaimedColumns(make([]exactlyonce.Event, 0, most), rows, err, 3+8, nil)
}

// taskRoom is how many more tasks a claim of named events may hold (MaxClaimTasks in all), and the
// tasks its statements locked beyond that, left out: not decoded (their payloads are not copied),
// not leased, and unlocked when the claim's transaction ends.
type taskRoom struct {
	room int
	left []int64
}

// scanClaimedHeads reads the rows ClaimDue locked (id, kind, attempts) as events, processing,
// appended to out (whose capacity should be the claim's limit: ClaimDue's two statements fill one
// slice); a task's own columns are read next (readClaimedTasks).
func scanClaimedHeads(out []exactlyonce.Event, rows *sql.Rows, err error) ([]exactlyonce.Event, error) {
	return scanClaimedColumns(out, rows, err, 3, nil)
}

// scanClaimedColumns reads rows of cols columns: id, kind, attempts, and, when there are more, a
// task's eight (decoded only for a task), appended to out, which is allocated at the statement's
// LIMIT when it is known. With tasks, a task beyond tasks.room is left out (tasks.left).
func scanClaimedColumns(out []exactlyonce.Event, rows *sql.Rows, err error, cols int, tasks *taskRoom) ([]exactlyonce.Event, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	raw, dest := make([]sql.RawBytes, cols), make([]any, cols)
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		c := exactlyonce.Event{State: exactlyonce.Processing, Kind: kindOf(raw[1])}
		if c.ID, err = strconv.ParseInt(string(raw[0]), 10, 64); err != nil {
			return nil, fmt.Errorf("claimed id %q: %w", raw[0], err)
		}
		if c.Attempts, err = strconv.Atoi(string(raw[2])); err != nil {
			return nil, fmt.Errorf("claimed event %d's attempts %q: %w", c.ID, raw[2], err)
		}
		if tasks != nil && c.Kind == exactlyonce.KindTask {
			if tasks.room == 0 {
				tasks.left = append(tasks.left, c.ID)
				continue
			}
			tasks.room--
		}
		if cols > 3 && c.Kind == exactlyonce.KindTask {
			if c.Task, err = scanTask(raw[3:]); err != nil {
				return nil, fmt.Errorf("claimed task %d: %w", c.ID, err)
			}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// readClaimedTasks reads the task columns of the tasks among claimed, whose rows tx holds locked,
// into their Task (ClaimedTasks), in statements of at most MarkChunk ids; a claim without a task
// sends none.
func readClaimedTasks(ctx context.Context, tx *sql.Tx, claimed []exactlyonce.Event) error {
	var at map[int64]int // a task's id -> its place in claimed
	for i, ev := range claimed {
		if ev.Kind == exactlyonce.KindTask {
			if at == nil {
				at = map[int64]int{}
			}
			at[ev.ID] = i
		}
	}
	ids := make([]int64, 0, len(at))
	for id := range at {
		ids = append(ids, id)
	}
	for rest := ids; len(rest) > 0; {
		chunk := rest[:min(len(rest), MarkChunk)]
		rest = rest[len(chunk):]
		q, args := mysql.ExpandIDs(queries.ClaimedTasks, chunk)
		rows, err := tx.QueryContext(ctx, q, append(args, len(chunk))...)
		if err != nil {
			return err
		}
		if err := scanClaimedTasks(rows, claimed, at); err != nil {
			return err
		}
	}
	for _, i := range at {
		if claimed[i].Task == nil {
			return fmt.Errorf("claimed task %d: its row was not read back", claimed[i].ID)
		}
	}
	return nil
}

// scanClaimedTasks reads ClaimedTasks' rows (id, then the task's columns) into the Task of the event
// of claimed at at[id].
func scanClaimedTasks(rows *sql.Rows, claimed []exactlyonce.Event, at map[int64]int) error {
	defer rows.Close()
	var (
		raw  [9]sql.RawBytes
		dest [9]any
	)
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest[:]...); err != nil {
			return err
		}
		id, err := strconv.ParseInt(string(raw[0]), 10, 64)
		if err != nil {
			return fmt.Errorf("claimed task id %q: %w", raw[0], err)
		}
		i, ok := at[id]
		if !ok {
			return fmt.Errorf("read back task %d, which the claim did not lock", id)
		}
		if claimed[i].Task, err = scanTask(raw[1:]); err != nil {
			return fmt.Errorf("claimed task %d: %w", id, err)
		}
	}
	return rows.Err()
}

// kindOf returns the kind named by b, without allocating for the two kinds the code knows.
func kindOf(b []byte) exactlyonce.Kind {
	switch string(b) {
	case string(exactlyonce.KindPlain):
		return exactlyonce.KindPlain
	case string(exactlyonce.KindTask):
		return exactlyonce.KindTask
	}
	return exactlyonce.Kind(b)
}

// scanTask decodes a claimed task's columns from their text: url, payload, reference_id,
// max_retries, routing_hash, position, worker_id, retry_base. A NULL reads as the zero value, as
// taskColumns reads it.
func scanTask(raw []sql.RawBytes) (*exactlyonce.Task, error) {
	num := func(name string, b sql.RawBytes) (int64, error) {
		if b == nil {
			return 0, nil
		}
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s %q: %w", name, b, err)
		}
		return n, nil
	}
	t := &exactlyonce.Task{URL: string(raw[0]), ReferenceID: string(raw[2]), WorkerID: string(raw[6])}
	if raw[1] != nil {
		t.Payload = append([]byte{}, raw[1]...)
	}
	hash, err := strconv.ParseUint(string(raw[4]), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("routing_hash %q: %w", raw[4], err)
	}
	t.Hash = uint32(hash)
	maxRetries, err := num("max_retries", raw[3])
	if err != nil {
		return nil, err
	}
	if t.Position, err = num("position", raw[5]); err != nil {
		return nil, err
	}
	retryBase, err := num("retry_base", raw[7])
	if err != nil {
		return nil, err
	}
	t.MaxRetries, t.RetryBase = int(maxRetries), int(retryBase)
	return t, nil
}
