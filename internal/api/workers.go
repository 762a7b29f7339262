package api

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// WorkerLister is what GET /workers needs of the event workers' registry (internal/mysql/agentstore
// implements it). A Server without one answers GET /workers with an empty list and
// GET /workers/{id} with 404.
type WorkerLister interface {
	// WorkersPage reads the live workers (done false, oldest first) or the done ones (most recently
	// done first) after a cursor: at most rows, and of those as many as fit in bytes of references
	// (at least one); the cursor after the last, and whether more may follow.
	WorkersPage(ctx context.Context, done bool, after exactlyonce.WorkerCursor, rows, bytes int) ([]exactlyonce.EventWorker, exactlyonce.WorkerCursor, bool, error)
	Worker(ctx context.Context, id string) (exactlyonce.EventWorker, bool, error)
}

// doneWorkersLimit bounds the done event workers one GET /workers lists (the most recent first).
const doneWorkersLimit = 1000

// workersBatch bounds the workers one read of GET /workers' listing returns: the listing reads
// batches until its answer is full (MaxListPayloadBytes), so it holds at most its answer and one
// batch, however many workers there are.
const workersBatch = 200

// WorkerJSON is an event worker as GET /workers shows it: its fields (docs/api.md), its agent and
// its references. Times are the database's clock.
type WorkerJSON struct {
	WorkerID          string    `json:"workerId"`
	AgentID           int64     `json:"agentId"`
	CreatedAt         time.Time `json:"createdAt"`
	LastCompletedTask *int64    `json:"lastCompletedTask"`
	TasksRemaining    int64     `json:"tasksRemaining"`
	WillTerminate     bool      `json:"willTerminate"`
	TasksCompleted    int64     `json:"tasksCompleted"`
	TasksFailed       int64     `json:"tasksFailed"`
	MaxReferenceCount int       `json:"maxReferenceCount"`
	IsDone            bool      `json:"isDone"`
	References        []string  `json:"references"`
}

func workerJSON(w exactlyonce.EventWorker) WorkerJSON {
	out := WorkerJSON{WorkerID: w.ID, AgentID: w.AgentID, CreatedAt: w.CreatedAt, TasksRemaining: w.TasksRemaining,
		WillTerminate: w.WillTerminate, TasksCompleted: w.TasksCompleted, TasksFailed: w.TasksFailed,
		MaxReferenceCount: w.MaxReferenceCount, IsDone: w.IsDone, References: w.References,
		LastCompletedTask: w.LastCompletedTask}
	if out.References == nil {
		out.References = []string{}
	}
	return out
}

// listWorkers is GET /workers: the live event workers (oldest first), then the done ones kept for
// audit (most recently done first, at most doneWorkersLimit); ?active=true lists only the former,
// ?active=false only the latter; any other parameter is a 400. At most MaxListPayloadBytes of
// workers. Consistent reads, no lock.
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) {
	v, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		s.error(w, r, err)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(v)) {
		if k != "active" {
			s.error(w, r, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown query parameter %q: the listing takes active", sanitize(k)))
			return
		}
	}
	var active, done bool
	switch {
	case !v.Has("active"):
		active, done = true, true
	case v.Get("active") == "true":
		active = true
	case v.Get("active") == "false":
		done = true
	default:
		s.error(w, r, exactlyonce.Errorf(exactlyonce.EINVALID, "active must be true or false, got %q", sanitize(v.Get("active"))))
		return
	}
	out := struct {
		Workers []json.RawMessage `json:"workers"` // each encoded once: counted, then written
		// Truncated says the list ended at MaxListPayloadBytes with workers left out.
		Truncated bool `json:"truncated,omitempty"`
	}{Workers: []json.RawMessage{}}
	l := s.Workers
	if l == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	// The list ends once the next worker would take it past MaxListPayloadBytes (a worker holds up
	// to its maxReferenceCount references of up to 255 characters each, and a Lambda answers at most
	// 6 MB): the live workers come first, and any worker is GET /workers/{workerId}. It is read a
	// batch at a time, each bounded by rows and by the bytes the answer has left, so that what it
	// holds is the answer and one batch, not every live worker.
	size := 0
	fill := func(done bool, limit int) error {
		var after exactlyonce.WorkerCursor
		for limit > 0 && !out.Truncated {
			ws, next, more, err := l.WorkersPage(r.Context(), done, after, min(workersBatch, limit), max(0, MaxListPayloadBytes-size))
			if err != nil {
				return err
			}
			for _, x := range ws {
				b, err := json.Marshal(workerJSON(x))
				if err != nil {
					return err
				}
				if len(out.Workers) > 0 && size+carried(b) > MaxListPayloadBytes {
					out.Truncated = true
					return nil
				}
				size += carried(b)
				out.Workers = append(out.Workers, b)
			}
			limit -= len(ws)
			if !more {
				return nil
			}
			after = next
		}
		return nil
	}
	if active {
		if err := fill(false, math.MaxInt); err != nil {
			s.error(w, r, err)
			return
		}
	}
	if done && !out.Truncated {
		if err := fill(true, doneWorkersLimit); err != nil {
			s.error(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getWorker is GET /workers/{workerId}: one event worker, live or done; 404 for an unknown id.
func (s *Server) getWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("workerId")
	notFound := exactlyonce.Errorf(exactlyonce.ENOTFOUND, "no event worker %q", sanitize(id))
	l := s.Workers
	if l == nil || id == "" || len(id) > 32 {
		s.error(w, r, notFound)
		return
	}
	x, found, err := l.Worker(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if !found {
		s.error(w, r, notFound)
		return
	}
	writeJSON(w, http.StatusOK, workerJSON(x))
}
