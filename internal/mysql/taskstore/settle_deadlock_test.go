package taskstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Two agents' settlements that each settle a task of a worker the other's draft grows deadlock
// (workers.sql says they can): agent 1's settlement S1 settles a/0, of agent 2's worker W2 with
// room, and c/0, of agent 1's full worker F1, so that c/1 is drafted into agent 1's worker W1 with
// room; agent 2's S2 settles b/0, of W1, and d/0, of agent 2's full F2, so that d/1 is drafted into
// W2. Each settlement's SettleWorkers locks the other's worker with room; the test holds each in its
// draft (called after SettleWorkers, before the drafted growth) until both are there, then lets them
// grow their own: each waits for the other. InnoDB picks one, which is rolled back and runs again
// (inTx), its draft drafted again. Both complete: every task settled once with one attempt, c/1 and
// d/1 handed on to their claims in their workers, and the books exact once those settle too.
func TestTwoAgentsSettlementsThatGrowEachOthersWorkersDeadlockAndBothComplete(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ids := map[string]int64{}
	for _, k := range []struct {
		ref string
		n   int
	}{{"a", 1}, {"b", 1}, {"c", 2}, {"d", 2}} {
		for i := range k.n {
			created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(k.ref, i)})
			require.NoError(t, err)
			ids[k.ref+string(rune('0'+i))] = created[0].ID
		}
	}
	claim := func(names ...string) (exactlyonce.Claim, map[string]exactlyonce.Event) {
		c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
		var want []int64
		for _, n := range names {
			want = append(want, ids[n])
		}
		claimed, err := store.Events.ClaimIDs(ctx, c, want, mysqltest.LeaseAll)
		require.NoError(t, err)
		require.Len(t, claimed.Leased, len(names))
		byName := map[string]exactlyonce.Event{}
		for _, n := range names {
			for _, ev := range claimed.Leased {
				if ev.ID == ids[n] {
					byName[n] = ev
				}
			}
		}
		return c, byName
	}
	c1, leased1 := claim("a0", "c0")
	c2, leased2 := claim("b0", "d0")
	// The workers, each with its task: W1 and F1 are agent 1's, W2 and F2 agent 2's; F1 and F2 full.
	assign := func(c exactlyonce.Claim, agent int64, w, ref, task string, full bool) {
		a := exactlyonce.WorkerAssignment{
			New:   []exactlyonce.EventWorker{{ID: w, AgentID: agent, MaxReferenceCount: 10}},
			Grow:  []exactlyonce.WorkerGrowth{{ID: w, AddTasks: 1, References: []string{ref}, WillTerminate: full}},
			Tasks: map[string][]int64{w: {ids[task]}},
		}
		require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, agent, a))
	}
	assign(c1, 2, "w_2", "a", "a0", false)
	assign(c1, 1, "w_f1", "c", "c0", true)
	assign(c2, 1, "w_1", "b", "b0", false)
	assign(c2, 2, "w_f2", "d", "d0", true)
	outcome := func(ev exactlyonce.Event, worker string) exactlyonce.TaskOutcome {
		task := *ev.Task
		task.WorkerID = worker
		ev.Task = &task
		return exactlyonce.TaskOutcome{Event: ev, Delivered: true, Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}
	}

	// Each draft waits, the first time it is called, until the other settlement's is called too: both
	// then hold the other's worker with room (SettleWorkers), and each grows its own next.
	var arrived sync.WaitGroup
	arrived.Add(2)
	var mu sync.Mutex
	drafts := map[int64]int{}
	draft := func(agent int64, w, ref, other string) *exactlyonce.DraftWorkers {
		return &exactlyonce.DraftWorkers{Agent: agent, Draft: func(tasks []exactlyonce.Event) exactlyonce.WorkerAssignment {
			mu.Lock()
			drafts[agent]++
			first := drafts[agent] == 1
			mu.Unlock()
			if first {
				arrived.Done()
				arrived.Wait()
			}
			a := exactlyonce.WorkerAssignment{Tasks: map[string][]int64{}}
			for _, task := range tasks {
				a.Tasks[w] = append(a.Tasks[w], task.ID)
			}
			if len(tasks) > 0 {
				a.Grow = []exactlyonce.WorkerGrowth{{ID: w, AddTasks: int64(len(tasks)), References: []string{other, ref}}}
			}
			return a
		}}
	}
	deadlocks := store.DB.Stats().Deadlocks
	var s1, s2 exactlyonce.TaskSettlement
	var err1, err2 error
	var done sync.WaitGroup
	done.Add(2)
	go func() {
		defer done.Done()
		s1, err1 = store.Tasks.SettleTasksDrafting(ctx, c1, []exactlyonce.TaskOutcome{outcome(leased1["a0"], "w_2"), outcome(leased1["c0"], "w_f1")},
			true, draft(1, "w_1", "c", "b"))
	}()
	go func() {
		defer done.Done()
		s2, err2 = store.Tasks.SettleTasksDrafting(ctx, c2, []exactlyonce.TaskOutcome{outcome(leased2["b0"], "w_1"), outcome(leased2["d0"], "w_f2")},
			true, draft(2, "w_2", "d", "a"))
	}()
	done.Wait()
	require.NoError(t, err1)
	require.NoError(t, err2)
	require.Equal(t, int64(1), store.DB.Stats().Deadlocks-deadlocks, "the two settlements deadlocked once")
	require.Equal(t, 3, drafts[1]+drafts[2], "the loser ran again, and drafted again")

	require.ElementsMatch(t, []int64{ids["a0"], ids["c0"]}, s1.Completed)
	require.ElementsMatch(t, []int64{ids["b0"], ids["d0"]}, s2.Completed)
	require.Len(t, s1.Next, 1)
	require.Equal(t, ids["c1"], s1.Next[0].ID, "c/1 handed on to S1's claim")
	require.Equal(t, "w_1", s1.Next[0].Task.WorkerID)
	require.Len(t, s2.Next, 1)
	require.Equal(t, ids["d1"], s2.Next[0].ID, "d/1 handed on to S2's claim")
	require.Equal(t, "w_2", s2.Next[0].Task.WorkerID)
	for _, n := range []string{"a0", "b0", "c0", "d0"} {
		ev, err := store.Events.Get(ctx, ids[n])
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, ev.State, n)
		require.Equal(t, 1, ev.ProcessCount, "%s settled once", n)
		attempts, err := store.Tasks.Attempts(ctx, ids[n])
		require.NoError(t, err)
		require.Len(t, attempts, 1, "%s: one attempt recorded", n)
	}

	// The tasks handed on settle in their turn; then every worker's books are exact.
	_, err := store.Tasks.SettleTasks(ctx, c1, []exactlyonce.TaskOutcome{outcome(s1.Next[0], "w_1")}, false)
	require.NoError(t, err)
	_, err = store.Tasks.SettleTasks(ctx, c2, []exactlyonce.TaskOutcome{outcome(s2.Next[0], "w_2")}, false)
	require.NoError(t, err)
	for _, n := range []string{"c1", "d1"} {
		ev, err := store.Events.Get(ctx, ids[n])
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, ev.State, n)
		require.Equal(t, 1, ev.ProcessCount, "%s settled once", n)
	}
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}
