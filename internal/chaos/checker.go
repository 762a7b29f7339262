package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/verify"
)

// check verifies the invariants and fills the report, through a live API process for GET /events.
func (r *run) check(ctx context.Context, collected []created, settled bool) {
	rep := &r.report
	violate := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	if !settled {
		violate("the system did not settle within %s: events still pending or messages still queued", r.cfg.Settle)
	}

	// What the clients were told.
	acked := map[int64]bool{} // id -> async
	for _, c := range collected {
		switch {
		case c.key != "" && (c.err != nil || c.unfinished || (c.status != http.StatusCreated && c.status != http.StatusAccepted) || c.id <= 0):
			// A keyed create is sent again until acknowledged: any other end is a violation
			// (checkKeys), not a failed create whose event may exist.
		case c.err == nil && (c.status == http.StatusCreated || c.status == http.StatusAccepted) && c.id > 0:
			if _, dup := acked[c.id]; dup {
				rep.DuplicateIDs++
				violate("id %d was handed to two clients", c.id)
			}
			acked[c.id] = c.async
			if c.late {
				rep.LateCreates++
			}
			if c.async {
				rep.AsyncCreates++
			} else {
				rep.SyncCreates++
			}
		case c.err == nil && c.status == http.StatusServiceUnavailable:
			rep.Refused++
		case c.err != nil && c.unreachable:
			rep.Unreachable++
		case c.err != nil:
			rep.NoAnswer++
		default:
			rep.OtherStatuses[c.status]++
		}
	}

	// What the database holds, checked against what the processes reported settling (internal/verify):
	// every event settled exactly once, by one claim that one process reported, or by a claim whose
	// process reported starting it and was killed (or lost its commit's answer) before reporting more.
	audit, err := mysqltest.AuditEvents(ctx, r.store.DB.Pool())
	if err != nil {
		violate("read events: %v", err)
		return
	}
	if err := r.store.DB.Pool().QueryRowContext(ctx, "SELECT COALESCE(SUM(events), 0) FROM event_pages").Scan(&rep.Packed); err != nil {
		violate("read the packed history: %v", err)
	}
	ledger := verify.NewLedger()
	files, _ := filepath.Glob(filepath.Join(r.reports, "*.reports"))
	for _, f := range files {
		if err := ledger.ReadFile(f); err != nil {
			violate("read the processes' reports %s: %v", filepath.Base(f), err)
		}
	}
	res := verify.Check(audit, ledger)
	rep.Reports, rep.Unreported = ledger.Reports(), res.Unreported
	rep.ProcessedByProcessor, rep.ProcessedBySweeper = res.ByProcessor, res.BySweeper
	for _, v := range res.Violations {
		if strings.Contains(v, "more than once") || strings.Contains(v, "reported settled by claim") ||
			strings.Contains(v, "but claims") {
			rep.Duplicates++
		}
		violate("%s", v)
	}
	for _, id := range res.Open {
		rep.Lost++
		violate("event %d never processed", id)
	}
	stored := make(map[int64]verify.Audit, len(audit))
	for _, e := range audit {
		if _, dup := stored[e.ID]; dup {
			rep.DuplicateIDs++
			violate("id %d is stored twice", e.ID)
		}
		stored[e.ID] = e
	}

	for id, async := range acked {
		e, ok := stored[id]
		if !ok {
			rep.Lost++
			violate("event %d, whose id a client received, does not exist", id)
			continue
		}
		want := []string{exactlyonce.ByAPI}
		if async {
			want = []string{exactlyonce.ByProcessor, exactlyonce.BySweeper}
		}
		if e.By != "" && !slices.Contains(want, e.By) {
			violate("event %d (async=%v) processed by %q", id, async, e.By)
		}
	}
	for id := range stored {
		if _, ok := acked[id]; !ok {
			rep.Orphans++
		}
	}

	r.checkKeys(ctx, collected, acked, violate)

	// Tasks: each one acknowledged is completed and was delivered; none was attempted out of its
	// reference's order.
	if r.tasks != nil {
		for _, c := range collected {
			if !c.task || c.err != nil || c.status != http.StatusAccepted || c.id <= 0 {
				continue
			}
			rep.TasksCreated++
			if e, ok := stored[c.id]; ok && e.State != exactlyonce.Processed {
				violate("task %d (%s/%d) is %s, not completed", c.id, c.ref, c.seq, e.State)
			}
			if !r.tasks.wasDelivered(fmt.Sprintf("task_%d", c.id)) {
				rep.Lost++
				violate("task %d (%s/%d) was never delivered", c.id, c.ref, c.seq)
			}
		}
		var problems []string
		rep.TasksDelivered, rep.TaskRepeats, problems = r.tasks.taskFigures()
		for _, p := range problems {
			violate("%s", p)
		}
	}
	if rep.Orphans > rep.Refused+rep.NoAnswer+others(rep.OtherStatuses) {
		violate("%d events stored that no client was told about, more than the %d creates that failed", rep.Orphans,
			rep.Refused+rep.NoAnswer+others(rep.OtherStatuses))
	}

	// GET /events equals the acknowledged creates (plus the commits whose answer was lost).
	apiURL, _ := r.apiURL()
	resp, err := http.Get(apiURL + "/events")
	if err != nil {
		violate("GET /events: %v", err)
	} else {
		var body struct {
			Count int64 `json:"count"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		rep.CountReported = body.Count
		if want := int64(len(acked) + rep.Orphans); body.Count != want {
			violate("GET /events says %d; acknowledged creates %d + committed unanswered %d = %d", body.Count, len(acked), rep.Orphans, want)
		}
	}

	// The DLQ holds exactly the poison.
	var dlq []string
	for range 200 {
		out, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.q.DLQURL), MaxNumberOfMessages: 10, VisibilityTimeout: 120})
		if err != nil {
			violate("read the DLQ: %v", err)
			break
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			dlq = append(dlq, aws.ToString(m.Body))
		}
	}
	rep.PoisonInDLQ = len(dlq)
	var want []string
	for i := range rep.PoisonInjected {
		want = append(want, poisonBody(i))
	}
	sort.Strings(dlq)
	sort.Strings(want)
	if strings.Join(dlq, "\n") != strings.Join(want, "\n") {
		violate("the DLQ holds %q; the run injected %q", dlq, want)
	}
}

// figures sums the counters every process reported (each one's last stats line: a killed
// process's last 200 ms are not counted, so they are lower bounds), once every process is gone. With
// RequireRetries, a run that retried no transaction is a violation: the retry helper's retry branch
// did not run.
func (r *run) figures() {
	rep := &r.report
	rep.RetriesByRole = map[string]int64{}
	var s ProcessStats
	r.mu.Lock()
	for role, st := range r.retired {
		s.add(*st)
		if st.Retries > 0 {
			rep.RetriesByRole[role] = st.Retries
		}
	}
	r.mu.Unlock()
	rep.Deadlocks, rep.LockWaitTimeouts, rep.Retries, rep.GaveUp = s.Deadlocks, s.LockWaitTimeouts, s.Retries, s.GaveUp
	rep.Received, rep.Deleted, rep.Failed, rep.Extended = s.Received, s.Deleted, s.Failed, s.Extended
	rep.ContenderHolds, rep.ContenderDeadlocks, rep.ContenderTimeouts = s.Holds, s.ContenderDeadlocks, s.ContenderTimeouts
	if r.cfg.RequireRetries && rep.Retries == 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("no transaction was retried (deadlocks %d, lock wait timeouts %d): the retry helper's retry branch did not run",
			rep.Deadlocks, rep.LockWaitTimeouts))
	}
}

func others(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
