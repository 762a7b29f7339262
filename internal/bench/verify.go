package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// idRange is the ids [first, first+n) of rows the bench loaded as they are, not through a worker.
type idRange struct{ first, n int64 }

// audit checks the events table against the reports of the workers that ran in this process, in
// ledger (internal/verify): every event settled by a worker is reported settled by that worker's
// claim, once; none is reported settled twice, or settled without a report; an event born settled
// by the API is reported by nobody. Rows loaded settled by the bench (history, preloaded reads) are
// seed data that no worker settled: they are left out, named by their id ranges. The caller
// requires what it expects of the result (every event settled, no unreported settlement: the bench
// kills no worker).
func audit(ctx context.Context, db *sql.DB, ledger *verify.Ledger, seeded ...idRange) (verify.Result, error) {
	store, err := wire.StoresOn(db, mysql.Config{})
	if err != nil {
		return verify.Result{}, err
	}
	all, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	if err != nil {
		return verify.Result{}, err
	}
	events := all[:0]
	for _, e := range all {
		if !inRanges(e.ID, seeded) {
			events = append(events, e)
		}
	}
	return verify.Check(events, ledger), nil
}

func inRanges(id int64, rs []idRange) bool {
	for _, r := range rs {
		if id >= r.first && id < r.first+r.n {
			return true
		}
	}
	return false
}

// settledOnce tells whether a result shows every event settled exactly once, each by one report.
func settledOnce(res verify.Result) bool {
	return res.OK() && len(res.Open) == 0 && res.Unreported == 0
}

// describe is a result with its first violations, for a check's detail.
func describe(res verify.Result) string {
	s := res.String()
	if n := len(res.Violations); n > 0 {
		s += ": " + strings.Join(res.Violations[:min(n, 3)], "; ")
		if n > 3 {
			s += fmt.Sprintf("; and %d more", n-3)
		}
	}
	return s
}
