// Package bench measures the system's hot paths against the real database (and the real SQS
// protocol, through goaws, where the queue is involved), side by side in one run, and reports every
// compared figure as a ratio to a reference measured in the same run: these machines are noisy, and
// only figures taken together can be compared.
//
// Groups, each a function that returns rows:
//
//	alloc   allocation + insert (POST /events's write path) per allocator strategy and client count,
//	        against an AUTO_INCREMENT table in a scratch database
//	claim   draining pending events with and without 1,000,000 processed rows of history
//	count   GET /events's exact count on 1,000,000 events beside 1,000; the write path with the
//	        count's fold beside it
//	async   POST /events/async to processed, end to end on the local stack, beside POST /events
//	idem    POST /events with a fresh Idempotency-Key beside none, with 1,000,000 keys stored beside
//	        none, and replays of one key (idempotency.go)
//	api     requests/s and latency of every endpoint under load
//	lambda  bootstrap sizes and start-up time beside a hello-world bootstrap
//	drain   100,000 pending events burned down by the sweeper's claim path
//	agents  the same with 1, 2, 4 and 8 standalone agent processes splitting the hash space; the
//	        time from a SIGKILL of one of 4 agents to its range processed again; idle statements
//	tasks   webhooks delivered in order per reference beside unordered, paced, and with 10% of the
//	        references failing (tasks.go)
//	reads   GET /events/{id} with 10,000,000 processed events beside 10,000, and each store
//	        operation's mean time at both sizes (reads.go)
//	archive GET /events/{id} in the window with Config.Archived archived events behind it beside
//	        none, archived reads beside the local S3's own GET, the database under the move (archive.go)
//	console the operators' console's reads through its server beside the API alone (console.go)
//
// Every database the benchmark creates is a scratch database (bench_...) that it drops when done.
// cmd/bench is the entrypoint; `make bench` runs it.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Mode is how long the benchmark runs.
type Mode string

const (
	// Full is the measurement: minutes, sizes as the targets state them.
	Full Mode = "full"
	// Smoke runs every group at toy sizes in seconds, so that the harness never rots. Targets are
	// not judged (the runs are too short to mean anything); correctness checks are.
	Smoke Mode = "smoke"
)

// Config configures a run.
type Config struct {
	Mode Mode
	// ServerDSN names the server scratch databases are created on (its database part is ignored).
	// The user needs CREATE and DROP, and PROCESS to watch InnoDB's purge.
	ServerDSN string
	// SQSLocal is the path of the sqslocal binary (tools/sqslocal), started on a free loopback port
	// for the groups that use a queue.
	SQSLocal string
	// RepoRoot is the module's root directory, where the Lambda functions are built from.
	RepoRoot string
	// Groups restricts the run to these groups (default: all, in the order of AllGroups).
	Groups []string
	// Archived is how many archived events the archive group writes behind its window (default:
	// 20,000,000 in full mode, 200,000 in smoke; about 60 bytes of disk each, checked before).
	Archived int64
	// Progress receives progress lines while the run goes (default os.Stderr).
	Progress io.Writer
}

// AllGroups lists the groups in the order they run.
var AllGroups = []string{"alloc", "claim", "count", "drain", "agents", "async", "idem", "api", "lambda", "counters", "tasks", "reads", "archive", "console"}

// Row is one figure. Ratios name the row they were divided by in Reference.
type Row struct {
	Group string  `json:"group"`
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Reference is, for a ratio, the name of the row in the denominator, and ReferenceValue its value.
	Reference      string  `json:"reference,omitempty"`
	ReferenceValue float64 `json:"reference_value,omitempty"`
	// Target is the goal, such as ">= 0.9"; Met says whether it was reached (absent when not judged).
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`

	goal *goal
}

// goal is a target: the value compared with a bound.
type goal struct {
	atLeast bool
	bound   float64
}

func (g goal) String() string {
	if g.atLeast {
		return fmt.Sprintf(">= %g", g.bound)
	}
	return fmt.Sprintf("<= %g", g.bound)
}

func (g goal) met(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if g.atLeast {
		return v >= g.bound
	}
	return v <= g.bound
}

func atLeast(b float64) *goal { return &goal{atLeast: true, bound: b} }
func atMost(b float64) *goal  { return &goal{atLeast: false, bound: b} }

// Check is a correctness check made along the way (ids unique, every event processed once, ...).
// A failed check fails the run, in smoke mode too.
type Check struct {
	Group  string `json:"group"`
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report is everything a run measured, as written to BENCH_OUT.
type Report struct {
	Mode     Mode      `json:"mode"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Seconds  float64   `json:"seconds"`
	Host     Host      `json:"host"`
	// Judged is false in smoke mode: the rows carry targets but no verdicts.
	Judged bool     `json:"judged"`
	Rows   []Row    `json:"rows"`
	Checks []Check  `json:"checks"`
	Errors []string `json:"errors,omitempty"`
}

// Host describes the machine and the database server.
type Host struct {
	GOOS     string `json:"goos"`
	GOARCH   string `json:"goarch"`
	CPUs     int    `json:"cpus"`
	Go       string `json:"go"`
	Database string `json:"database"`
}

// Failed tells whether the run must fail: a group errored or a correctness check failed. Missed
// performance targets do not fail it; they are reported.
func (r *Report) Failed() bool { return len(r.Errors) > 0 || r.FailedChecks() > 0 }

// FailedChecks counts the correctness checks that failed.
func (r *Report) FailedChecks() int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

// run is the state shared by the groups of one run.
type run struct {
	cfg    Config
	report *Report
	mu     sync.Mutex
	start  time.Time
	// tpl is the run's migrated template database, made at the first migrated scratch database
	// (scratch.go).
	tpl template
}

// Run runs the configured groups, one after another, and returns the report. A group that fails is
// recorded in the report's Errors and the next group runs; ctx cancelled stops the run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Mode = cmp.Or(cfg.Mode, Full)
	if cfg.Mode != Full && cfg.Mode != Smoke {
		return nil, fmt.Errorf("bench: mode must be %q or %q, got %q", Full, Smoke, cfg.Mode)
	}
	if cfg.Progress == nil {
		cfg.Progress = os.Stderr
	}
	groups := cfg.Groups
	if len(groups) == 0 {
		groups = AllGroups
	}
	for _, g := range groups {
		if !slices.Contains(AllGroups, g) {
			return nil, fmt.Errorf("bench: unknown group %q (groups: %s)", g, strings.Join(AllGroups, ", "))
		}
	}
	r := &run{cfg: cfg, start: time.Now(), report: &Report{
		Mode: cfg.Mode, Started: time.Now().UTC(), Judged: cfg.Mode == Full,
		Host: Host{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()},
	}}
	if v, err := serverVersion(ctx, cfg.ServerDSN); err != nil {
		return nil, fmt.Errorf("bench: database server: %w", err)
	} else {
		r.report.Host.Database = v
	}
	funcs := map[string]func(context.Context, *run) error{
		"alloc": runAlloc, "claim": runClaim, "count": runCount, "drain": runDrain, "agents": runAgents, "async": runAsync,
		"idem": runIdem, "api": runAPI, "lambda": runLambda,
		"counters": runCounters,                                                                      // counters.go
		"tasks":    runTasks,                                                                         // tasks.go
		"reads":    runReads,                                                                         // reads.go
		"archive":  func(ctx context.Context, r *run) error { return runArchive(ctx, r, "archive") }, // archive.go
		"console":  runConsole,                                                                       // console.go
	}
	for _, g := range AllGroups {
		if !slices.Contains(groups, g) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r.progress(g, "starting")
		t0 := time.Now()
		if err := funcs[g](ctx, r); err != nil {
			r.report.Errors = append(r.report.Errors, fmt.Sprintf("%s: %v", g, err))
			r.progress(g, "FAILED: %v", err)
			continue
		}
		r.progress(g, "done in %s", time.Since(t0).Round(100*time.Millisecond))
	}
	r.dropTemplate()
	r.report.Finished = time.Now().UTC()
	r.report.Seconds = math.Round(time.Since(r.start).Seconds()*10) / 10
	if err := ctx.Err(); err != nil {
		r.report.Errors = append(r.report.Errors, "interrupted: "+err.Error())
	}
	return r.report, nil
}

func (r *run) smoke() bool { return r.cfg.Mode == Smoke }

// pick returns the full-mode or the smoke-mode value.
func pick[T any](r *run, full, smoke T) T {
	if r.smoke() {
		return smoke
	}
	return full
}

// progress prints one line of progress with the time since the run started.
func (r *run) progress(group, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.cfg.Progress, "bench %6.1fs [%s] %s\n", time.Since(r.start).Seconds(), group, fmt.Sprintf(format, args...))
}

// add records rows, judging those with a goal in full mode.
func (r *run) add(rows ...Row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range rows {
		if row.goal != nil {
			row.Target = row.goal.String()
			if r.cfg.Mode == Full {
				met := row.goal.met(row.Value)
				row.Met = &met
			}
		}
		row.Value = round(row.Value)
		row.ReferenceValue = round(row.ReferenceValue)
		r.report.Rows = append(r.report.Rows, row)
	}
}

// ratio returns a row num/ref named name, in the group, with the reference named.
func ratio(group, name string, num, ref Row, g *goal, note string) Row {
	v := math.NaN()
	if ref.Value > 0 {
		v = num.Value / ref.Value
	}
	return Row{Group: group, Name: name, Value: v, Unit: "x", Reference: ref.Name, ReferenceValue: ref.Value, goal: g, Note: note}
}

// check records a correctness check.
func (r *run) check(group, name string, ok bool, detail string) {
	r.mu.Lock()
	r.report.Checks = append(r.report.Checks, Check{Group: group, Name: name, OK: ok, Detail: detail})
	r.mu.Unlock()
	if !ok {
		r.progress(group, "CHECK FAILED: %s: %s", name, detail)
	}
}

// round keeps four significant figures, so that the JSON does not pretend to more precision.
func round(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	mag := math.Pow(10, 3-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	// NaN is not JSON: a ratio without a reference is written as null via a copy.
	type jsonRow struct {
		Row
		Value          *float64 `json:"value"`
		ReferenceValue *float64 `json:"reference_value,omitempty"`
	}
	out := struct {
		*Report
		Rows []jsonRow `json:"rows"`
	}{Report: r}
	for _, row := range r.Rows {
		jr := jsonRow{Row: row}
		if !math.IsNaN(row.Value) && !math.IsInf(row.Value, 0) {
			v := row.Value
			jr.Value = &v
		}
		if row.Reference != "" {
			v := row.ReferenceValue
			jr.ReferenceValue = &v
		}
		out.Rows = append(out.Rows, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteTable prints the rows grouped, with targets and verdicts, then the checks and errors.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "group\tname\tvalue\tunit\treference\ttarget\tmet\t\n")
	for _, row := range r.Rows {
		ref := row.Reference
		if ref != "" {
			ref = fmt.Sprintf("%s (%s)", ref, format(row.ReferenceValue))
		}
		met := ""
		switch {
		case row.Met != nil && *row.Met:
			met = "MET"
		case row.Met != nil:
			met = "NOT MET"
		case row.Target != "":
			met = "not judged"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", row.Group, row.Name, format(row.Value), row.Unit, ref, row.Target, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, row := range r.Rows {
		if row.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", row.Name, row.Note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n%s\n", strings.Join(notes, "\n"))
	}
	for _, c := range r.Checks {
		if !c.OK {
			fmt.Fprintf(w, "CHECK FAILED [%s] %s: %s\n", c.Group, c.Name, c.Detail)
		}
	}
	fmt.Fprintf(w, "\n%d checks, %d failed; mode %s, %.0f s, %s/%s %d CPUs, %s\n",
		len(r.Checks), r.FailedChecks(), r.Mode, r.Seconds, r.Host.GOOS, r.Host.GOARCH, r.Host.CPUs, r.Host.Database)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "ERROR %s\n", e)
	}
	return nil
}

// WriteMarkdown writes the rows as a Markdown table, with the notes below it (docs/performance.md
// carries the latest one).
func (r *Report) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "%s run of %s UTC, %d CPUs, %s/%s, %s, %.0f s; %d checks, %d failed.\n\n",
		strings.ToUpper(string(r.Mode[:1]))+string(r.Mode[1:]), r.Started.Format("2006-01-02 15:04"), r.Host.CPUs,
		r.Host.GOOS, r.Host.GOARCH, r.Host.Database, r.Seconds, len(r.Checks), r.FailedChecks())
	fmt.Fprintln(w, "| group | name | value | unit | reference | target | met |")
	fmt.Fprintln(w, "| --- | --- | ---: | --- | --- | --- | --- |")
	for _, row := range r.Rows {
		ref := ""
		if row.Reference != "" {
			ref = fmt.Sprintf("%s (%s)", row.Reference, format(row.ReferenceValue))
		}
		met := ""
		if row.Met != nil {
			met = map[bool]string{true: "MET", false: "NOT MET"}[*row.Met]
		}
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %s | %s |\n", row.Group, row.Name, format(row.Value), row.Unit, ref, row.Target, met)
	}
	fmt.Fprint(w, "\n<details><summary>notes on the rows</summary>\n\n")
	for _, row := range r.Rows {
		if row.Note != "" {
			fmt.Fprintf(w, "- `%s`: %s\n", row.Name, row.Note)
		}
	}
	_, err := fmt.Fprint(w, "\n</details>\n")
	return err
}

func format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 100:
		return commas(int64(math.Round(v)))
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// errTimeout marks a bounded wait that ran out.
var errTimeout = errors.New("timed out")
