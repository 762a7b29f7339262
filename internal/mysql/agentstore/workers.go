package agentstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// Event workers: the registry of internal/processing's EventService (migrations/0010_event_workers.sql,
// workers.sql).

// WorkerBooks gathers, in a settlement of tasks (taskstore's SettleTasks), what changes on each
// event worker: its counts change in the transaction that settles its tasks (Write). The settlement
// of tasks writes the books through these transaction-level methods; the statements, on the
// event_workers table, are this store's (workers.sql).
type WorkerBooks map[string]*workerBook

type workerBook struct {
	completed, failed, remaining int64
	// promoted counts the queued tasks that follow this worker's settled heads: they join it if it
	// has room, which SettleWorkers decides on the worker's row.
	promoted int64
	last     sql.NullInt64
}

func (b WorkerBooks) of(ev exactlyonce.Event) *workerBook {
	if ev.Task == nil || ev.Task.WorkerID == "" {
		return nil
	}
	return b.get(ev.Task.WorkerID)
}

func (b WorkerBooks) get(w string) *workerBook {
	wb, ok := b[w]
	if !ok {
		wb = &workerBook{}
		b[w] = wb
	}
	return wb
}

// Completed counts task id of ev's worker delivered.
func (b WorkerBooks) Completed(ev exactlyonce.Event, id int64) {
	if wb := b.of(ev); wb != nil {
		wb.completed++
		wb.remaining--
		wb.last = sql.NullInt64{Int64: id, Valid: true}
	}
}

// Failed counts ev, a task of its worker, failed for good.
func (b WorkerBooks) Failed(ev exactlyonce.Event) {
	if wb := b.of(ev); wb != nil {
		wb.failed++
		wb.remaining--
	}
}

// Promoting counts a queued task that follows a settled head of worker w.
func (b WorkerBooks) Promoting(w string) { b.get(w).promoted++ }

// Write applies the books in one statement (SettleWorkers), which also makes done the
// willTerminate workers left with nothing, and gives the promoted tasks' count to the workers with
// room only. Which workers became done is not read back (a statement more in every settlement,
// which the tasks bench measured): the EventService learns it at its next pulse. Which have room
// is, by the caller, when it promotes tasks into them (WorkersWithRoom).
func (b WorkerBooks) Write(ctx context.Context, tx *sql.Tx) error {
	if len(b) == 0 {
		return nil
	}
	ids := b.ids()
	q := queries.SettleWorkers
	var args []any
	for _, col := range []string{"remaining", "completed", "failed", "remaining", "promoted", "last"} {
		var cases strings.Builder
		for _, w := range ids {
			wb := b[w]
			var v any
			switch col {
			case "remaining":
				v = wb.remaining
			case "completed":
				v = wb.completed
			case "failed":
				v = wb.failed
			case "promoted":
				v = wb.promoted
			case "last":
				v = wb.last
			}
			cases.WriteString(" WHEN ? THEN ?")
			args = append(args, w, v)
		}
		q = strings.Replace(q, "/*"+col+"*/", cases.String(), 1)
	}
	q, idArgs := expandStrings(q, ids)
	_, err := tx.ExecContext(ctx, q, append(args, idArgs...)...)
	return err
}

func (b WorkerBooks) ids() []string {
	ids := make([]string, 0, len(b))
	for w := range b {
		ids = append(ids, w)
	}
	slices.Sort(ids)
	return ids
}

// WorkerIfRoom is the subquery a settlement's promotion names a promoted task's worker with: the
// worker (its one argument) if it is live and not full, else NULL (workers.sql).
var WorkerIfRoom = strings.TrimSuffix(strings.TrimSpace(queries.WorkerIfRoom), ";")

// WithRoom reads which of the workers to which queued tasks are promoting, of those read says to,
// have room for them (WorkersWithRoom), after Write locked their rows; none asked, no statement.
func (b WorkerBooks) WithRoom(ctx context.Context, tx *sql.Tx, read func(w string) bool) (map[string]bool, error) {
	var ids []string
	for _, w := range b.ids() {
		if b[w].promoted > 0 && read(w) {
			ids = append(ids, w)
		}
	}
	room := map[string]bool{}
	if len(ids) == 0 {
		return room, nil
	}
	q, args := expandStrings(queries.WorkersWithRoom, ids)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, err
		}
		room[w] = true
	}
	return room, rows.Err()
}

func expandStrings(q string, ss []string) (string, []any) {
	args := make([]any, len(ss))
	for i, s := range ss {
		args[i] = s
	}
	return strings.Replace(q, "/*ids*/", mysql.Placeholders(len(ss)), 1), args
}

// AssignWorkers writes an assignment of agent's in one transaction (WriteAssignment). A grown worker
// that is done, unknown or run by another agent fails it with a *exactlyonce.WorkerConflictError
// naming the worker.
func (s *Store) AssignWorkers(ctx context.Context, claimID string, agent int64, a exactlyonce.WorkerAssignment) error {
	var conflict *exactlyonce.WorkerConflictError
	err := s.core.InTx(ctx, func(tx *sql.Tx) error { return WriteAssignment(ctx, tx, claimID, agent, a) })
	if errors.As(err, &conflict) {
		return conflict
	}
	return mysql.Interpret("assign event workers", err)
}

// WriteAssignment writes an assignment of agent's in tx (AssignWorkers'): the new workers, the
// tasks' worker (only those still leased to claimID: the number assigned must match, or it fails),
// the workers' growth. A grown worker that is done,
// unknown or run by another agent returns a *exactlyonce.WorkerConflictError naming it, and the
// caller rolls tx back: the rest is written already.
func WriteAssignment(ctx context.Context, tx *sql.Tx, claimID string, agent int64, a exactlyonce.WorkerAssignment) error {
	if err := insertWorkers(ctx, tx, a); err != nil {
		return err
	}
	if err := assignTasks(ctx, tx, claimID, a.Tasks); err != nil {
		return err
	}
	conflict, err := growWorkers(ctx, tx, agent, a.Grow, newFull(a))
	if err == nil && conflict != "" {
		return &exactlyonce.WorkerConflictError{WorkerID: conflict}
	}
	return err
}

// DraftsInTransactions says that this store's registry is the one the event and task stores write
// an EventService's drafts to (WriteDraft in a claim's transaction and in a settlement's):
// processing.DraftingStore.
func (s *Store) DraftsInTransactions() bool { return true }

// WriteDraft writes, in tx (a chaining settlement's, taskstore's SettleTasks, or a claim's,
// eventstore's), an assignment that an EventService drafted for the tasks the settlement promotes or
// the claim leases (exactlyonce.DraftWorkers): the new workers and the workers' growth, as
// AssignWorkers writes them; the tasks' worker is the settlement's or the claim's to name, in the
// statement that promotes or leases them. A grown worker that is done, unknown
// or run by another agent returns a *exactlyonce.WorkerConflictError naming it, and the caller
// rolls tx back: the growth of the others is written already.
func WriteDraft(ctx context.Context, tx *sql.Tx, agent int64, a exactlyonce.WorkerAssignment) error {
	if err := insertWorkers(ctx, tx, a); err != nil {
		return err
	}
	conflict, err := growWorkers(ctx, tx, agent, a.Grow, newFull(a))
	if err == nil && conflict != "" {
		return &exactlyonce.WorkerConflictError{WorkerID: conflict}
	}
	return err
}

// newFull names the new workers of a that a's growth makes full: GrowWorkers grows no full worker,
// and a new worker is grown in the assignment that makes it, so it is inserted with room
// (insertWorkers) and made full by its growth, which comes after.
func newFull(a exactlyonce.WorkerAssignment) map[string]bool {
	grown := map[string]bool{}
	for _, g := range a.Grow {
		grown[g.ID] = true
	}
	full := map[string]bool{}
	for _, w := range a.New {
		if grown[w.ID] {
			full[w.ID] = w.WillTerminate
		}
	}
	return full
}

// maxInsertWorkerBytes bounds the references' text one InsertWorker carries (a worker's is up to
// WORKER_MAX_REFERENCES ids), under the 16 KB past which RDS Proxy pins a session.
const maxInsertWorkerBytes = 8 << 10

// insertWorkers inserts a's new workers, each with room if a grows it (newFull), in one statement
// (InsertWorker) per maxInsertWorkerBytes of references: an assignment makes one new worker per
// WORKER_MAX_REFERENCES references it places, and a claim of a processor's batch of 500 heads made
// five, each its own round trip.
func insertWorkers(ctx context.Context, tx *sql.Tx, a exactlyonce.WorkerAssignment) error {
	grown := map[string]bool{}
	for _, g := range a.Grow {
		grown[g.ID] = true
	}
	var args []any
	rows, size := 0, 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		q := strings.Replace(queries.InsertWorker, "/*rows*/",
			strings.TrimSuffix(strings.Repeat("(?, ?, NOW(6), NULL, 0, ?, 0, 0, ?, 0, ?, ?, ?, NULL), ", rows), ", "), 1)
		_, err := tx.ExecContext(ctx, q, args...)
		args, rows, size = args[:0], 0, 0
		return err
	}
	for _, w := range a.New {
		refs, err := json.Marshal(nonNil(w.References))
		if err != nil {
			return err
		}
		if rows > 0 && size+len(refs) > maxInsertWorkerBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		will := w.WillTerminate && !grown[w.ID]
		args = append(args, w.ID, w.AgentID, will, w.MaxReferenceCount, len(w.References), string(refs), w.FirstHash)
		rows, size = rows+1, size+len(refs)
	}
	return flush()
}

// maxAssignIDs bounds the tasks of one AssignTasks statement: about 8 bytes of text each, twice
// (in its worker's case and in the guard), under the 16 KB past which RDS Proxy pins a session.
const maxAssignIDs = 500

// assignTasks names the worker of each task (AssignTasks), one statement per maxAssignIDs tasks,
// and checks that every task was still leased to the claim.
func assignTasks(ctx context.Context, tx *sql.Tx, claimID string, tasks map[string][]int64) error {
	workers := slices.Sorted(maps.Keys(tasks))
	type task struct {
		worker string
		id     int64
	}
	var all []task
	for _, w := range workers {
		for _, id := range slices.Sorted(slices.Values(tasks[w])) {
			all = append(all, task{w, id})
		}
	}
	for len(all) > 0 {
		chunk := all[:min(len(all), maxAssignIDs)]
		all = all[len(chunk):]
		var cases strings.Builder
		var args []any
		ids := make([]int64, 0, len(chunk))
		for i := 0; i < len(chunk); {
			w := chunk[i].worker
			var mine []int64
			for ; i < len(chunk) && chunk[i].worker == w; i++ {
				mine = append(mine, chunk[i].id)
			}
			cases.WriteString(" WHEN id IN (" + mysql.Placeholders(len(mine)) + ") THEN ?")
			args = append(append(args, mysql.IDArgs(mine)...), w)
			ids = append(ids, mine...)
		}
		q, idArgs := mysql.ExpandIDs(strings.Replace(queries.AssignTasks, "/*cases*/", cases.String(), 1), ids)
		args = append(append(append(args, claimID), idArgs...), len(ids))
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(ids)) {
			return fmt.Errorf("assigned %d of %d tasks: their lease was taken over", n, len(ids))
		}
	}
	return nil
}

// growWorkers grows the workers of an assignment in one statement (GrowWorkers) and returns the id
// of a worker it could not grow (done, full, or another agent's), or "".
func growWorkers(ctx context.Context, tx *sql.Tx, agent int64, growth []exactlyonce.WorkerGrowth, newFull map[string]bool) (string, error) {
	if len(growth) == 0 {
		return "", nil
	}
	grow := slices.Clone(growth)
	slices.SortFunc(grow, func(x, y exactlyonce.WorkerGrowth) int { return strings.Compare(x.ID, y.ID) })
	q := queries.GrowWorkers
	var args []any
	for _, col := range []string{"add", "refs", "count", "will"} {
		var cases strings.Builder
		for _, g := range grow {
			var v any
			switch col {
			case "add":
				v = g.AddTasks
			case "refs":
				refs, err := json.Marshal(nonNil(g.References))
				if err != nil {
					return "", err
				}
				v = string(refs)
			case "count":
				v = len(g.References)
			case "will":
				v = g.WillTerminate || newFull[g.ID]
			}
			cases.WriteString(" WHEN ? THEN ?")
			args = append(args, g.ID, v)
		}
		q = strings.Replace(q, "/*"+col+"*/", cases.String(), 1)
	}
	ids := make([]string, len(grow))
	for i, g := range grow {
		ids[i] = g.ID
	}
	q, idArgs := expandStrings(q, ids)
	res, err := tx.ExecContext(ctx, q, append(append(args, agent), idArgs...)...)
	if err != nil {
		return "", err
	}
	n, err := res.RowsAffected()
	if err != nil || n == int64(len(grow)) {
		return "", err
	}
	// Fewer changed than named: which one is not this agent's to grow.
	q, idArgs = expandStrings(queries.WorkersOfAgent, ids)
	rows, err := tx.QueryContext(ctx, q, append([]any{agent}, idArgs...)...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	ok := map[string]bool{}
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return "", err
		}
		ok[w] = true
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	for _, id := range ids {
		if !ok[id] {
			return id, nil
		}
	}
	return "", fmt.Errorf("grew %d of %d event workers, and each is this agent's to grow", n, len(grow))
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

func scanWorkers(rows *sql.Rows, err error) ([]exactlyonce.EventWorker, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []exactlyonce.EventWorker
	for rows.Next() {
		var w exactlyonce.EventWorker
		var last sql.NullInt64
		var refs string
		if err := rows.Scan(&w.ID, &w.AgentID, &w.CreatedAt, &last, &w.TasksRemaining, &w.WillTerminate, &w.TasksCompleted,
			&w.TasksFailed, &w.MaxReferenceCount, &w.IsDone, &refs, &w.FirstHash); err != nil {
			return nil, err
		}
		if last.Valid {
			w.LastCompletedTask = &last.Int64
		}
		if err := json.Unmarshal([]byte(refs), &w.References); err != nil {
			return nil, fmt.Errorf("event worker %s: references: %w", w.ID, err)
		}
		w.CreatedAt = w.CreatedAt.UTC()
		out = append(out, w)
	}
	return out, rows.Err()
}

// ActiveWorkers lists the event workers that are not done, oldest first.
func (s *Store) ActiveWorkers(ctx context.Context) ([]exactlyonce.EventWorker, error) {
	ws, err := scanWorkers(s.db.QueryContext(ctx, queries.ActiveWorkers))
	return ws, mysql.Interpret("list event workers", err)
}

// DoneWorkers lists up to limit done event workers, the most recently done first.
func (s *Store) DoneWorkers(ctx context.Context, limit int) ([]exactlyonce.EventWorker, error) {
	ws, err := scanWorkers(s.db.QueryContext(ctx, queries.DoneWorkers, limit))
	return ws, mysql.Interpret("list event workers", err)
}

// Worker reads one event worker; false if there is none with that id.
func (s *Store) Worker(ctx context.Context, id string) (exactlyonce.EventWorker, bool, error) {
	ws, err := scanWorkers(s.db.QueryContext(ctx, queries.WorkerByID, id))
	if err != nil || len(ws) == 0 {
		return exactlyonce.EventWorker{}, false, mysql.Interpret("read event worker", err)
	}
	return ws[0], true, nil
}

// AdoptWorker makes agent the runner of live worker id, if from still runs it; false otherwise.
func (s *Store) AdoptWorker(ctx context.Context, id string, from, agent int64) (bool, error) {
	res, err := s.db.ExecContext(ctx, queries.AdoptWorker, agent, id, from)
	if err != nil {
		return false, mysql.Interpret("adopt event worker", err)
	}
	n, err := res.RowsAffected()
	return n == 1, mysql.Interpret("adopt event worker", err)
}

// StopWorkers marks the named live workers willTerminate; those with nothing left become done.
func (s *Store) StopWorkers(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	q, args := expandStrings(queries.StopWorkers, ids)
	_, err := s.db.ExecContext(ctx, q, args...)
	return mysql.Interpret("stop event workers", err)
}

// WorkerHeads lists the open heads of a worker's references, in their order.
func (s *Store) WorkerHeads(ctx context.Context, id string) ([]int64, error) {
	ids, err := mysql.ScanIDs(s.db.QueryContext(ctx, queries.WorkerHeads, id))
	return ids, mysql.Interpret("read an event worker's tasks", err)
}

// PruneWorkers deletes up to limit done workers done for longer than retention; it returns how many.
func (s *Store) PruneWorkers(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, queries.PruneWorkers, retention.Microseconds(), limit)
	if err != nil {
		return 0, mysql.Interpret("prune event workers", err)
	}
	n, err := res.RowsAffected()
	return n, mysql.Interpret("prune event workers", err)
}
