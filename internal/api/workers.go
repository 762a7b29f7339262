package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// WorkerLister is what GET /workers needs of the event workers' registry (internal/mysql/agentstore
// implements it). A Server without one answers GET /workers with an empty list and
// GET /workers/{id} with 404.
type WorkerLister interface {
	ActiveWorkers(ctx context.Context) ([]exactlyonce.EventWorker, error)
	DoneWorkers(ctx context.Context, limit int) ([]exactlyonce.EventWorker, error)
	Worker(ctx context.Context, id string) (exactlyonce.EventWorker, bool, error)
}

// doneWorkersLimit bounds the done event workers one GET /workers lists (the most recent first).
const doneWorkersLimit = 1000

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
	var ws []exactlyonce.EventWorker
	if active {
		got, err := l.ActiveWorkers(r.Context())
		if err != nil {
			s.error(w, r, err)
			return
		}
		ws = append(ws, got...)
	}
	if done {
		got, err := l.DoneWorkers(r.Context(), doneWorkersLimit)
		if err != nil {
			s.error(w, r, err)
			return
		}
		ws = append(ws, got...)
	}
	// The list ends once the next worker would take it past MaxListPayloadBytes (a worker holds up
	// to its maxReferenceCount references of up to 255 characters each, and a Lambda answers at most
	// 6 MB): the live workers come first, and any worker is GET /workers/{workerId}.
	size := 0
	for _, x := range ws {
		j := workerJSON(x)
		b, err := json.Marshal(j)
		if err != nil {
			s.error(w, r, err)
			return
		}
		if len(out.Workers) > 0 && size+carried(b) > MaxListPayloadBytes {
			out.Truncated = true
			break
		}
		size += carried(b)
		out.Workers = append(out.Workers, b)
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
