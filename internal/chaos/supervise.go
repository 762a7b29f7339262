package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/child"
)

// worker is one running worker process.
type worker struct {
	role  string
	child *child.Process
}

// lastStats returns the last stats line the worker printed.
func (w *worker) lastStats() WorkerStats {
	out := w.child.Output()
	for i := len(out) - 1; i >= 0; i-- {
		if raw, ok := strings.CutPrefix(out[i], "stats "); ok {
			var s WorkerStats
			if json.Unmarshal([]byte(raw), &s) == nil {
				return s
			}
		}
	}
	return WorkerStats{}
}

// startWorker starts a worker process of role. Each writes its reports of what it settled to a file
// of its own in r.reports, and every second one takes the lease path.
func (r *run) startWorker(role string) error {
	r.mu.Lock()
	r.starts++
	n := r.starts
	r.mu.Unlock()
	env := append([]string{child.RoleEnv + "=" + role,
		"CHAOS_REPORTS=" + filepath.Join(r.reports, fmt.Sprintf("%s-%d.reports", role, n)),
		fmt.Sprintf("CHAOS_LEASED=%t", n%2 == 0)}, r.env...)
	c, err := child.StartProcess(r.cfg.Self, nil, env, os.Stderr)
	if err != nil {
		return err
	}
	if _, err := c.WaitLine("started", 30*time.Second); err != nil {
		c.Kill()
		return err
	}
	r.mu.Lock()
	r.workers = append(r.workers, &worker{role: role, child: c})
	r.report.WorkerStarts++
	r.mu.Unlock()
	return nil
}

func (r *run) stopWorkers() {
	r.mu.Lock()
	ws := r.workers
	r.workers = nil
	r.mu.Unlock()
	for _, w := range ws {
		w.child.Kill()
		r.retire(w)
	}
}

func (r *run) retire(w *worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retired.add(w.lastStats())
}
