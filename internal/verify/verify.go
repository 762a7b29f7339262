// Package verify is the exactly-once checker that every test, the chaos run and the bench use.
//
// It does not trust the table it checks. process_count cannot exceed 1 by construction (the
// settling UPDATE is guarded), so counting it proves the guard, not the protocol. Instead every
// process that claims (the processor, the sweeper, a standalone agent) reports, in its own process
// and independently of the table, each claim it starts and the events each claim settled
// (processing.Reporter); a Ledger collects those reports, in memory or from the files such
// processes write; and Check requires exactly one report per settled event, from the claim the
// table names.
//
// A process killed between a commit and its report (or whose commit's answer was lost, so that it
// believes nothing committed) leaves a claim it reported starting and no report of what that claim
// settled. Check accepts an event settled by such a claim (the table
// records the claim on every settled event) and counts it in Result.Unreported, which a caller
// bounds by the number of workers it killed.
package verify

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/exactlyonce/exactlyonce"
)

// Audit is one event as the checker sees it: what the table says settled it. The checker does not
// read the table itself; internal/mysql/mysqltest's AuditEvents reads every event so, the packed
// history's included.
type Audit struct {
	ID    int64
	State exactlyonce.State
	// By is the path that settled it (api, processor, sweeper); empty while open.
	By string
	// ClaimID is the claim that holds it (while processing) or settled it; empty for events born
	// settled (POST /events) and for pending ones.
	ClaimID  string
	HasValue bool
}

// Ledger collects workers' reports. It is a processing.Reporter, for workers in this process, and
// reads the files of claiming processes (FileReporter). Safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	claims  map[string]bool    // claims a process said it was starting
	settled map[int64][]string // event -> the claims that reported settling it (with unindexed)
	strays  []string           // reports of settlements by claims never reported starting
	// unindexed are the reports of settlements not yet in settled, in the order they came: a report
	// is only appended under the lock, and indexed when the ledger is read (index). The bench's
	// drains report every batch inside their timed loop, where a map update per event cost about
	// half a microsecond of a claiming goroutine's time.
	unindexed []settlement
}

// settlement is one report: claim settled ids.
type settlement struct {
	claim string
	ids   []int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{claims: map[string]bool{}, settled: map[int64][]string{}}
}

// Claiming records that a process started claim id.
func (l *Ledger) Claiming(id string) {
	l.mu.Lock()
	l.claims[id] = true
	l.mu.Unlock()
}

// Settled records that claim id settled ids.
func (l *Ledger) Settled(id string, ids []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.claims[id] {
		l.strays = append(l.strays, id)
	}
	l.unindexed = append(l.unindexed, settlement{claim: id, ids: append([]int64(nil), ids...)})
}

// index moves the unindexed reports into settled. The caller holds l.mu.
func (l *Ledger) index() {
	for _, r := range l.unindexed {
		for _, e := range r.ids {
			l.settled[e] = append(l.settled[e], r.claim)
		}
	}
	l.unindexed = nil
}

// Reports returns how many settlements were reported in all.
func (l *Ledger) Reports() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index()
	n := 0
	for _, c := range l.settled {
		n += len(c)
	}
	return n
}

// Read records the reports a FileReporter wrote. A last line without its newline (the process was
// killed in the middle of writing it) is ignored: its write had not completed, so the process had
// not reported it.
func (l *Ledger) Read(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		fields := strings.Fields(line)
		switch {
		case len(fields) == 2 && fields[0] == "claiming":
			l.Claiming(fields[1])
		case len(fields) == 3 && fields[0] == "settled":
			var ids []int64
			for _, s := range strings.Split(fields[2], ",") {
				id, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return fmt.Errorf("report %q: %w", strings.TrimSpace(line), err)
				}
				ids = append(ids, id)
			}
			l.Settled(fields[1], ids)
		default:
			return fmt.Errorf("report %q: not a report line", strings.TrimSpace(line))
		}
	}
}

// ReadFile records the reports in the file at path; a missing file holds none.
func (l *Ledger) ReadFile(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return l.Read(f)
}

// FileReporter is a claiming process's processing.Reporter: it appends one line per report to a
// file, each with one write(2) on a file opened O_APPEND, so a SIGKILL leaves whole lines and at
// most one partial last line (which Ledger.Read ignores). No fsync: it survives the process's death,
// which is what the chaos run causes, not the machine's.
type FileReporter struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

// OpenFileReporter opens (creating) the report file at path.
func OpenFileReporter(path string) (*FileReporter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &FileReporter{f: f}, nil
}

func (r *FileReporter) Claiming(id string) { r.write("claiming " + id + "\n") }

func (r *FileReporter) Settled(id string, ids []int64) {
	b := make([]byte, 0, len(id)+16+12*len(ids))
	b = append(b, "settled "...)
	b = append(b, id...)
	b = append(b, ' ')
	for i, e := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, e, 10)
	}
	r.write(string(append(b, '\n')))
}

func (r *FileReporter) write(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.WriteString(line); err != nil && r.err == nil {
		r.err = err
	}
}

// Close closes the file and returns the first write error, if any: a report that could not be
// written makes the check that reads it fail, as it should.
func (r *FileReporter) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cmpErr(r.err, r.f.Close())
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Result is what Check found.
type Result struct {
	Events  int // rows in the table
	Settled int // of them settled
	// By path, of the settled events.
	ByAPI, ByProcessor, BySweeper, ByAgent int
	// Reported are the settled events with exactly one report of their settlement.
	Reported int
	// Unreported are the settled events whose claim was reported starting but whose settlement was
	// not reported: its process died between the commit and the report.
	Unreported int
	// Open are the events not settled.
	Open []int64
	// Violations are the broken invariants, each naming the event and the claims involved.
	Violations []string
}

// OK tells whether no invariant was broken.
func (r Result) OK() bool { return len(r.Violations) == 0 }

func (r *Result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Check compares the table's events with the claiming processes' reports in l:
//   - an event settled by a claim is reported settled by exactly one claim, the one the table
//     names (or its claim was reported starting and its process died before reporting the rest);
//   - an event born settled (POST /events) is reported settled by no claim;
//   - no report names an event that is not settled, or not settled by that claim;
//   - every settled event has its value.
func Check(events []Audit, l *Ledger) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index()
	var res Result
	res.Events = len(events)
	stored := make(map[int64]bool, len(events))
	for _, e := range events {
		stored[e.ID] = true
		reports := l.settled[e.ID]
		if !e.State.Settled() {
			res.Open = append(res.Open, e.ID)
			if len(reports) > 0 {
				res.violate("event %d is %s, but claims %v reported settling it", e.ID, e.State, reports)
			}
			continue
		}
		res.Settled++
		if !e.HasValue && e.State != exactlyonce.Failed {
			res.violate("event %d is settled without a value", e.ID)
		}
		switch e.By {
		case exactlyonce.ByAPI:
			res.ByAPI++
			if len(reports) > 0 {
				res.violate("event %d was born settled by the API, but claims %v reported settling it", e.ID, reports)
			}
			continue
		case exactlyonce.ByProcessor:
			res.ByProcessor++
		case exactlyonce.BySweeper:
			res.BySweeper++
		case exactlyonce.ByAgent:
			res.ByAgent++
		default:
			res.violate("event %d was settled by %q, which is no path", e.ID, e.By)
		}
		switch {
		case len(reports) > 1:
			res.violate("event %d was settled more than once: claims %v each reported settling it", e.ID, reports)
		case len(reports) == 1 && reports[0] != e.ClaimID:
			res.violate("event %d was reported settled by claim %s, but the table says claim %q settled it", e.ID, reports[0], e.ClaimID)
		case len(reports) == 1:
			res.Reported++
		case l.claims[e.ClaimID]:
			res.Unreported++
		default:
			res.violate("event %d was settled by claim %q, which no process reported starting", e.ID, e.ClaimID)
		}
	}
	var ghosts []int64
	for id := range l.settled {
		if !stored[id] {
			ghosts = append(ghosts, id)
		}
	}
	sort.Slice(ghosts, func(i, j int) bool { return ghosts[i] < ghosts[j] })
	for _, id := range ghosts {
		res.violate("claims %v reported settling event %d, which does not exist", l.settled[id], id)
	}
	for _, c := range l.strays {
		res.violate("claim %s reported settlements without first reporting that it started", c)
	}
	sort.Slice(res.Open, func(i, j int) bool { return res.Open[i] < res.Open[j] })
	return res
}

// String summarises the result in one line.
func (r Result) String() string {
	return fmt.Sprintf("%d events: %d settled (api %d, processor %d, sweeper %d, agent %d; %d reported once, %d by processes that died before reporting), %d open, %d violations",
		r.Events, r.Settled, r.ByAPI, r.ByProcessor, r.BySweeper, r.ByAgent, r.Reported, r.Unreported, len(r.Open), len(r.Violations))
}
