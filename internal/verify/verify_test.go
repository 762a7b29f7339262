package verify_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func settled(id int64, by, claim string) verify.Audit {
	return verify.Audit{ID: id, State: exactlyonce.Processed, By: by, ClaimID: claim, HasValue: true}
}

// The checker must be able to fail: each way a settlement can be wrong is reported, naming the
// event and the claims.
func TestCheckerCatchesEveryBrokenInvariant(t *testing.T) {
	t.Parallel()
	l := verify.NewLedger()
	for _, c := range []string{"a", "b", "c", "dead"} {
		l.Claiming(c)
	}
	l.Settled("a", []int64{1, 2, 3})
	l.Settled("b", []int64{3})  // 3 settled twice: two workers each say they did it
	l.Settled("c", []int64{4})  // the table says another claim settled 4
	l.Settled("a", []int64{5})  // 5 was born settled by the API
	l.Settled("c", []int64{6})  // 6 is still pending
	l.Settled("c", []int64{99}) // 99 does not exist
	l.Settled("nobody", []int64{2})
	res := verify.Check([]verify.Audit{
		settled(1, exactlyonce.ByProcessor, "a"),
		settled(2, exactlyonce.BySweeper, "a"),
		settled(3, exactlyonce.ByProcessor, "a"),
		settled(4, exactlyonce.ByProcessor, "a"),
		settled(5, exactlyonce.ByAPI, ""),
		{ID: 6, State: exactlyonce.Pending},
		settled(7, exactlyonce.BySweeper, "dead"), // its worker died before reporting: allowed, counted
		settled(8, exactlyonce.BySweeper, "ghost"),
		{ID: 9, State: exactlyonce.Processed, By: exactlyonce.ByProcessor, ClaimID: "a"},
	}, l)
	want := []string{
		"event 2 was settled more than once",        // a and nobody
		"event 3 was settled more than once",        // a and b
		"event 4 was reported settled by claim c",   // the table says a
		"event 5 was born settled by the API",       // reported by a
		"event 6 is pending, but claims [c]",        // not settled
		"event 8 was settled by claim \"ghost\"",    // nobody reported starting it
		"event 9 is settled without a value",        // its claim started: it also counts as unreported
		"reported settling event 99",                // does not exist
		"claim nobody reported settlements without", // never said it started
	}
	joined := strings.Join(res.Violations, "\n")
	for _, w := range want {
		require.Contains(t, joined, w)
	}
	require.Len(t, res.Violations, len(want), joined)
	require.Equal(t, 2, res.Unreported, "7 (claim dead) and 9 (claim a) were settled by claims that started and did not report them")
	require.Equal(t, 1, res.Reported, "only event 1 has exactly one matching report")
	require.Equal(t, []int64{6}, res.Open)
	require.False(t, res.OK())
}

func TestCheckerPassesWhenEveryEventIsReportedOnce(t *testing.T) {
	t.Parallel()
	l := verify.NewLedger()
	l.Claiming("a")
	l.Settled("a", []int64{1, 2})
	l.Claiming("b")
	l.Settled("b", []int64{4})
	res := verify.Check([]verify.Audit{settled(1, exactlyonce.ByProcessor, "a"), settled(2, exactlyonce.ByProcessor, "a"),
		settled(3, exactlyonce.ByAPI, ""), settled(4, exactlyonce.ByAgent, "b")}, l)
	require.True(t, res.OK(), res.Violations)
	require.Equal(t, 3, res.Reported)
	require.Equal(t, 1, res.ByAPI)
	require.Equal(t, 1, res.ByAgent, "the standalone agent's path is a path")
}

// Reports written by a worker process reach the ledger, and a line cut short by a kill is not a
// report.
func TestFileReportsRoundTripAndIgnoreACutLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reports")
	r, err := verify.OpenFileReporter(path)
	require.NoError(t, err)
	r.Claiming("c1")
	r.Settled("c1", []int64{10, 11})
	r.Claiming("c2")
	require.NoError(t, r.Close())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("settled c2 12,1") // killed mid-line
	require.NoError(t, err)
	require.NoError(t, f.Close())

	l := verify.NewLedger()
	require.NoError(t, l.ReadFile(path))
	require.NoError(t, l.ReadFile(filepath.Join(t.TempDir(), "none")), "a worker that never reported wrote no file")
	res := verify.Check([]verify.Audit{settled(10, exactlyonce.BySweeper, "c1"), settled(11, exactlyonce.BySweeper, "c1"),
		settled(12, exactlyonce.BySweeper, "c2")}, l)
	require.True(t, res.OK(), res.Violations)
	require.Equal(t, 2, res.Reported)
	require.Equal(t, 1, res.Unreported)

	bad := verify.NewLedger()
	require.Error(t, bad.Read(strings.NewReader("settled c1 x\n")))
}

// Against the real database: processors and sweepers racing over the same events, both paths,
// each reporting to the ledger; the check passes with every event reported exactly once.
func TestCheckerOnRacingWorkers(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx := context.Background()
	var ids []int64
	for range 300 {
		id, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	_, err := store.Events.CreateProcessed(ctx, "sync")
	require.NoError(t, err)
	l := verify.NewLedger()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			works := exactlyonce.Works{exactlyonce.KindPlain: exactlyonce.ValueWork{Leased: w%2 == 1}}
			if w < 3 {
				e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Works: works, Report: l}
				for {
					b, err := e.ProcessDue(ctx, 0, 20)
					if err != nil || b.Claimed == 0 {
						return
					}
				}
			}
			e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.ByProcessor, Works: works, Report: l}
			for i := 0; i < len(ids); i += 10 {
				_, _ = e.ProcessIDs(ctx, ids[(i+w*50)%len(ids):min((i+w*50)%len(ids)+10, len(ids))])
			}
		}()
	}
	wg.Wait()
	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	res := verify.Check(audit, l)
	require.True(t, res.OK(), res.Violations)
	require.Empty(t, res.Open)
	require.Equal(t, 300, res.Reported, res.String())
	require.Equal(t, 1, res.ByAPI)
}
