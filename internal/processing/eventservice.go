package processing

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// WorkerStore is what an EventService needs of the event workers' registry and of the agents
// (internal/mysql/agentstore implements it).
type WorkerStore interface {
	AssignWorkers(ctx context.Context, claimID string, agent int64, a exactlyonce.WorkerAssignment) error
	// OrphanWorkers lists up to limit live workers whose agent is neither agent nor one of live and
	// whose first reference's hash is in r, oldest first (their ID and AgentID).
	OrphanWorkers(ctx context.Context, agent int64, live []int64, r exactlyonce.HashRange, limit int) ([]exactlyonce.EventWorker, error)
	// AdoptedWorker reads live worker id's References and WillTerminate if agent runs it.
	AdoptedWorker(ctx context.Context, id string, agent int64) (exactlyonce.EventWorker, bool, error)
	// LiveWorkers says which of ids are live workers.
	LiveWorkers(ctx context.Context, ids []string) (map[string]bool, error)
	AdoptWorker(ctx context.Context, id string, from, agent int64) (bool, error)
	StopWorkers(ctx context.Context, ids []string) error
	WorkerHeads(ctx context.Context, id string) ([]int64, error)
	PruneWorkers(ctx context.Context, retention time.Duration, limit int) (int64, error)
	AgentsAt(ctx context.Context) ([]exactlyonce.Agent, time.Time, error)
}

// DraftingStore is a WorkerStore whose registry is the one the event and task stores write in their
// own transactions (agentstore's): over one, an EventService gives the tasks a claim leases and the
// tasks a settlement hands on their event workers in that claim's or settlement's transaction
// (exactlyonce.DraftWorkers), with no assignment's transaction of their own. Over any other
// WorkerStore (a registry of its own, a test's wrapper) it writes every assignment through
// AssignWorkers, in a transaction of its own.
type DraftingStore interface {
	WorkerStore
	// DraftsInTransactions says that the drafts the event and task stores write are this registry's.
	DraftsInTransactions() bool
}

// DefaultMaxReferences is an event worker's default maxReferenceCount (WORKER_MAX_REFERENCES).
const DefaultMaxReferences = 100

// DefaultWorkerRetention is how long a done event worker's row is kept (WORKER_RETENTION).
const DefaultWorkerRetention = 7 * 24 * time.Hour

// pruneEvery is how often an EventService prunes done workers, pruneBatch how many at most a time.
const (
	pruneEvery = time.Minute
	pruneBatch = 1000
)

// EventService packs the references of the tasks an agent delivers into event workers: a task joins the event worker that holds its
// reference, else one with room, else a new one. An event worker holds at most MaxReferences
// references; once it has them it is willTerminate: it takes no new reference, completes the tasks
// it holds (and the tasks queued behind them, which the settlements promote into it), and is done.
// Everything is in the registry (event_workers), written in the transactions that assign and
// settle the tasks, so that the counts are exact and nothing is lost when the process stops: at its
// pulses another agent adopts the live workers whose agent is gone (Recover).
//
// The delivery itself is the engine's (tasks.go): concurrent across references, in order within
// one, each task under its claim's lease. The event worker is the unit of ownership and of
// bookkeeping, not a goroutine. Tasks without a reference join no event worker.
type EventService struct {
	Store WorkerStore
	// AgentID is the id of the agent this service runs in (its Member's, set by agents.New).
	AgentID func() int64
	// MaxReferences is each new event worker's maxReferenceCount. Default DefaultMaxReferences.
	MaxReferences int
	// Retention is how long a done event worker's row is kept. Default DefaultWorkerRetention.
	Retention time.Duration
	Logger    *slog.Logger

	mu        sync.Mutex
	workers   map[string]*eventWorker
	order     []*eventWorker // this agent's live workers, oldest first
	byRef     map[string]*eventWorker
	refill    []int64
	lastPrune time.Time
}

// eventWorker is the service's view of one of its live event workers.
type eventWorker struct {
	id            string
	refs          []string
	willTerminate bool
}

func (s *EventService) max() int { return cmp.Or(s.MaxReferences, DefaultMaxReferences) }

func (s *EventService) agent() int64 {
	if s.AgentID == nil {
		return 0
	}
	return s.AgentID()
}

func (s *EventService) logger() *slog.Logger { return cmp.Or(s.Logger, slog.Default()) }

func newWorkerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "w_" + hex.EncodeToString(b[:])
}

func (s *EventService) init() {
	if s.workers == nil {
		s.workers = map[string]*eventWorker{}
		s.byRef = map[string]*eventWorker{}
	}
}

// draft is an event worker as an assignment would leave it.
type draft struct {
	id    string
	refs  []string
	will  bool
	add   int64
	isNew bool
	hash  uint32
}

// assign gives each task of claimID an event worker and writes the assignment; it returns the tasks with
// their worker named. A task that already names one keeps it: a retry, a task promoted behind its
// reference's head, or a task of an event worker another agent runs (delivered under that event worker, whose
// counts the settlement keeps). The service's lock is held across the assignment's transaction,
// so its assignments are decided one at a time.
func (s *EventService) assign(ctx context.Context, claimID string, tasks []exactlyonce.Event) ([]exactlyonce.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	d := s.draftLocked(tasks)
	if len(d.named) == 0 {
		return tasks, nil
	}
	if err := s.Store.AssignWorkers(ctx, claimID, s.agent(), d.a); err != nil {
		var conflict *exactlyonce.WorkerConflictError
		if errors.As(err, &conflict) {
			// Adopted by another agent (this one was ejected), or done: no longer this service's.
			s.forget(conflict.WorkerID)
		}
		return nil, err
	}
	s.applyLocked(d)
	out := make([]exactlyonce.Event, len(tasks))
	for i, t := range tasks {
		if w, ok := d.named[t.ID]; ok {
			task := *t.Task
			task.WorkerID = w
			t.Task = &task
		}
		out[i] = t
	}
	return out, nil
}

// maxDraftConflicts is how many times drafting runs a transaction again after its drafted growth
// met a worker that is no longer this service's, before it runs it with no draft (its tasks then
// have no worker, and get theirs in an assignment of their own, as before the drafts).
const maxDraftConflicts = 3

// drafting runs write, a transaction that gives tasks their event workers as it writes them (a
// claim's, which leases them; a chaining settlement's, which hands them on behind a worker with no
// room), with a DraftWorkers of s's (exactlyonce.DraftWorkers): the drafts are decided as assign
// decides a claim's, and written in that transaction, with no assignment's transaction of their
// own. s's lock is held across it, taken before the transaction begins (as assign takes it), so
// that s's drafts and assignments are decided one at a time, and no transaction that holds rows
// ever waits for the lock. The draft of the run that committed is remembered. A conflict (a worker
// another agent adopted, or done) forgets the worker and runs write again.
func drafting[T any](s *EventService, write func(*exactlyonce.DraftWorkers) (T, error)) (T, error) {
	if !s.drafts() {
		return write(nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	for attempt := 0; ; attempt++ {
		var last *assignment
		dw := &exactlyonce.DraftWorkers{Agent: s.agent(), Draft: func(tasks []exactlyonce.Event) exactlyonce.WorkerAssignment {
			last = s.draftLocked(tasks) // called once in every run of the transaction: the last is the one committed
			return last.a
		}, Room: s.roomLocked}
		if attempt >= maxDraftConflicts {
			dw = nil
		}
		res, err := write(dw)
		var conflict *exactlyonce.WorkerConflictError
		if dw != nil && errors.As(err, &conflict) {
			s.forget(conflict.WorkerID)
			continue
		}
		if err == nil && last != nil {
			s.applyLocked(last)
		}
		return res, err
	}
}

// roomLocked tells what s knows of worker id's room (exactlyonce.DraftWorkers.Room): known if it
// is one of s's; then full for certain if s remembers it willTerminate (s remembers that only from
// a transaction that committed, applyLocked, or from the registry, Recover, and will_terminate, once
// set, is never cleared: GrowWorkers keeps the greater, StopWorkers sets it), else with room as far
// as s knows. s.mu is held.
func (s *EventService) roomLocked(id string) (room, known bool) {
	w, ok := s.workers[id]
	if !ok {
		return false, false
	}
	return !w.willTerminate, true
}

// drafts tells whether s drafts its tasks' event workers in the transactions of the event and task
// stores (DraftingStore).
func (s *EventService) drafts() bool {
	d, ok := s.Store.(DraftingStore)
	return ok && d.DraftsInTransactions()
}

// assignment is an assignment as draftLocked decided it, to be written, then remembered
// (applyLocked).
type assignment struct {
	drafts   map[string]*draft
	refDraft map[string]*draft
	named    map[int64]string
	a        exactlyonce.WorkerAssignment
}

// draftLocked decides the event worker of each task that has a reference and no worker: its
// reference's, if that one has room, else one with room, else a new one. It writes and remembers
// nothing; s.mu is held.
func (s *EventService) draftLocked(tasks []exactlyonce.Event) *assignment {
	drafts := map[string]*draft{}
	var fresh []*draft
	draftOf := func(w *eventWorker) *draft {
		if d, ok := drafts[w.id]; ok {
			return d
		}
		d := &draft{id: w.id, refs: slices.Clone(w.refs), will: w.willTerminate}
		drafts[w.id] = d
		return d
	}
	roomy := func() *draft {
		for _, d := range fresh {
			if !d.will && len(d.refs) < s.max() {
				return d
			}
		}
		for _, w := range s.order {
			if d := draftOf(w); !d.will && len(d.refs) < s.max() {
				return d
			}
		}
		return nil
	}
	refDraft := map[string]*draft{}
	named := map[int64]string{}
	a := exactlyonce.WorkerAssignment{Tasks: map[string][]int64{}}
	for _, t := range tasks {
		if t.Task == nil || t.Task.ReferenceID == "" || t.Task.WorkerID != "" {
			continue
		}
		ref := t.Task.ReferenceID
		d := refDraft[ref]
		if d == nil {
			if w, ok := s.byRef[ref]; ok && !w.willTerminate {
				d = draftOf(w)
			} else {
				if d = roomy(); d == nil {
					d = &draft{id: newWorkerID(), isNew: true, hash: t.Task.Hash}
					drafts[d.id] = d
					fresh = append(fresh, d)
				}
				d.refs = append(d.refs, ref)
				d.will = d.will || len(d.refs) >= s.max()
			}
			refDraft[ref] = d
		}
		d.add++
		a.Tasks[d.id] = append(a.Tasks[d.id], t.ID)
		named[t.ID] = d.id
	}
	out := &assignment{drafts: drafts, refDraft: refDraft, named: named}
	if len(named) == 0 {
		out.a = exactlyonce.WorkerAssignment{}
		return out
	}
	for _, d := range drafts {
		if d.isNew {
			a.New = append(a.New, exactlyonce.EventWorker{ID: d.id, AgentID: s.agent(), MaxReferenceCount: s.max(),
				FirstHash: d.hash})
		}
		if d.add > 0 || d.isNew {
			a.Grow = append(a.Grow, exactlyonce.WorkerGrowth{ID: d.id, AddTasks: d.add, References: d.refs, WillTerminate: d.will})
		}
	}
	out.a = a
	return out
}

// applyLocked remembers an assignment once it is written; s.mu is held.
func (s *EventService) applyLocked(d *assignment) {
	if len(d.named) == 0 {
		return
	}
	for _, dr := range d.drafts {
		w, ok := s.workers[dr.id]
		if !ok {
			w = &eventWorker{id: dr.id}
			s.workers[dr.id] = w
			s.order = append(s.order, w)
		}
		w.refs, w.willTerminate = dr.refs, dr.will
	}
	for ref, dr := range d.refDraft {
		s.byRef[ref] = s.workers[dr.id]
	}
}

func (s *EventService) forget(id string) {
	w, ok := s.workers[id]
	if !ok {
		return
	}
	delete(s.workers, id)
	s.order = slices.DeleteFunc(s.order, func(x *eventWorker) bool { return x == w })
	for _, ref := range w.refs {
		if s.byRef[ref] == w {
			delete(s.byRef, ref)
		}
	}
}

// Stop marks every event worker of this service willTerminate (an agent leaving: SIGTERM, a
// Lambda's deadline): those with nothing left are done at once; the others keep their tasks, for
// the agent that adopts them once this one is gone. The service starts over empty.
func (s *EventService) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.order))
	for _, w := range s.order {
		ids = append(ids, w.id)
	}
	if err := s.Store.StopWorkers(ctx, ids); err != nil {
		return err
	}
	s.workers, s.byRef, s.order, s.refill = nil, nil, nil, nil
	return nil
}

// Reset forgets every event worker of this service without writing anything: its agent was
// ejected, so they are the adopters' now (agents.Rangeless.Reset). The service starts over empty.
func (s *EventService) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers, s.byRef, s.order, s.refill = nil, nil, nil, nil
}

// Recover adopts the live event workers whose agent is gone (expired, or no longer registered)
// and whose first reference falls in r, the agent's range: each becomes this service's, and the
// open heads of its references are queued for delivery (TakeRefill), in their order; the tasks
// queued behind them follow as the heads settle. It also forgets this service's done workers
// (ForgetDone) and prunes done workers past the retention, at most once a minute. It returns the
// workers adopted.
//
// A pulse reads only what recovery needs: the ids and agents of at most recoverBatch orphaned
// workers (not every live worker's references), and the references of those it adopts, until
// they pass recoverBytes; the rest are the next pulse's (an adopted worker is no longer an orphan).
func (s *EventService) Recover(ctx context.Context, r exactlyonce.HashRange) ([]string, error) {
	me := s.agent()
	if me == 0 {
		return nil, nil
	}
	agents, now, err := s.Store.AgentsAt(ctx)
	if err != nil {
		return nil, err
	}
	var live []int64
	for _, a := range agents {
		if a.Expiration.After(now) && a.ID != me {
			live = append(live, a.ID)
		}
	}
	// This service's willTerminate workers that are no longer live are done (the settlement of
	// their last task made them so): forgotten. A live one stays, and is marked again at Stop.
	if err := s.ForgetDone(ctx); err != nil {
		return nil, err
	}
	orphans, err := s.Store.OrphanWorkers(ctx, me, live, r, recoverBatch)
	if err != nil {
		return nil, err
	}
	var adopted []string
	read := 0
	for _, o := range orphans {
		if read >= recoverBytes {
			break // the next pulse adopts the rest
		}
		ok, err := s.Store.AdoptWorker(ctx, o.ID, o.AgentID, me)
		if err != nil {
			return adopted, err
		}
		if !ok {
			continue // another agent adopted it first
		}
		w, ok, err := s.Store.AdoptedWorker(ctx, o.ID, me)
		if err != nil {
			return adopted, err
		}
		if !ok {
			continue // done since (its last task settled), or adopted from this agent in turn
		}
		heads, err := s.Store.WorkerHeads(ctx, w.ID)
		if err != nil {
			return adopted, err
		}
		for _, ref := range w.References {
			read += len(ref)
		}
		read += 8 * len(heads)
		s.mu.Lock()
		s.init()
		s.forget(w.ID)
		ew := &eventWorker{id: w.ID, refs: w.References, willTerminate: w.WillTerminate}
		s.workers[w.ID] = ew
		s.order = append(s.order, ew)
		for _, ref := range w.References {
			if cur, ok := s.byRef[ref]; !ok || cur.willTerminate {
				s.byRef[ref] = ew
			}
		}
		s.refill = append(s.refill, heads...)
		s.mu.Unlock()
		adopted = append(adopted, w.ID)
		s.logger().Info("event workers: adopted a worker whose agent is gone", "worker", w.ID, "from", o.AgentID,
			"agent", me, "heads", len(heads))
	}
	if time.Since(s.lastPrune) > pruneEvery {
		s.lastPrune = time.Now()
		if _, err := s.Store.PruneWorkers(ctx, cmp.Or(s.Retention, DefaultWorkerRetention), pruneBatch); err != nil {
			s.logger().Warn("event workers: pruning failed", "err", err)
		}
	}
	return adopted, nil
}

// recoverBatch bounds the orphaned workers one pulse considers, recoverBytes the references (and
// heads) its adoptions read: a pulse's cost is a batch however many workers are live.
const (
	recoverBatch = 100
	recoverBytes = 1 << 20
)

// ForgetDone forgets this service's willTerminate workers that are no longer live (Recover does it
// at every pulse): it reads only whether each of those is live, not the live workers.
func (s *EventService) ForgetDone(ctx context.Context) error {
	s.mu.Lock()
	var ids []string
	for _, w := range s.order {
		if w.willTerminate {
			ids = append(ids, w.id)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	live, err := s.Store.LiveWorkers(ctx, ids)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if w := s.workers[id]; w != nil && w.willTerminate && !live[id] {
			s.forget(id)
		}
	}
	return nil
}

// TakeRefill returns (and forgets) the tasks recovery found open in the workers it adopted.
func (s *EventService) TakeRefill() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.refill
	s.refill = nil
	return out
}

// Workers lists this service's live event workers (their ids), oldest first.
func (s *EventService) Workers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.order))
	for i, w := range s.order {
		out[i] = w.id
	}
	return out
}
