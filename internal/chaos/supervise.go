package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/child"
)

// process is one running process.
type proc struct {
	role  string
	child *child.Process
	url   string // an API's base URL
}

// lastStats returns the last stats line the process printed.
func (w *proc) lastStats() ProcessStats {
	out := w.child.Output()
	for i := len(out) - 1; i >= 0; i-- {
		if raw, ok := strings.CutPrefix(out[i], "stats "); ok {
			var s ProcessStats
			if json.Unmarshal([]byte(raw), &s) == nil {
				return s
			}
		}
	}
	return ProcessStats{}
}

// startProcess starts a process of role. Each writes its reports of what it settled to a file
// of its own in r.reports, and every second one of its role takes the lease path.
func (r *run) startProcess(role string) error {
	r.mu.Lock()
	r.starts[role]++
	n := r.starts[role]
	r.mu.Unlock()
	env := append([]string{child.RoleEnv + "=" + role,
		"CHAOS_REPORTS=" + filepath.Join(r.reports, fmt.Sprintf("%s-%d.reports", role, n)),
		fmt.Sprintf("CHAOS_LEASED=%t", n%2 == 0)}, r.env...)
	c, err := child.StartProcess(r.cfg.Self, nil, env, os.Stderr)
	if err != nil {
		return err
	}
	line, err := c.WaitLine("started", 30*time.Second)
	if err != nil {
		c.Kill()
		return err
	}
	url, _ := strings.CutPrefix(line, "started ")
	if role != RoleAPI {
		url = ""
	}
	r.mu.Lock()
	r.procs = append(r.procs, &proc{role: role, child: c, url: url})
	if role == RoleAPI {
		close(r.apiStarted)
		r.apiStarted = make(chan struct{})
	}
	r.report.ProcessStarts++
	r.mu.Unlock()
	return nil
}

// apiURL returns the base URL of a live API process, at random, or "" when none is live (one was
// killed and its successor is not up yet) with a channel closed when one starts.
func (r *run) apiURL() (string, <-chan struct{}) {
	r.mu.Lock()
	var urls []string
	for _, w := range r.procs {
		if w.role == RoleAPI {
			urls = append(urls, w.url)
		}
	}
	started := r.apiStarted
	r.mu.Unlock()
	if len(urls) == 0 {
		return "", started
	}
	return urls[r.intn(len(urls))], nil
}

// stopProcesses kills the processes of the given roles (every role when none is given).
func (r *run) stopProcesses(roles ...string) {
	r.mu.Lock()
	var ws, keep []*proc
	for _, w := range r.procs {
		if len(roles) == 0 || slices.Contains(roles, w.role) {
			ws = append(ws, w)
		} else {
			keep = append(keep, w)
		}
	}
	r.procs = keep
	r.mu.Unlock()
	for _, w := range ws {
		w.child.Kill()
		r.retire(w)
	}
}

func (r *run) retire(w *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retired[w.role] == nil {
		r.retired[w.role] = &ProcessStats{}
	}
	r.retired[w.role].add(w.lastStats())
}
