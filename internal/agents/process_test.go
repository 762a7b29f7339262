package agents_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// slowWork is leased work that takes a while, so that an agent holds leases most of the time and a
// kill finds claims in flight.
type slowWork struct{ delay time.Duration }

func (w slowWork) Do(ctx context.Context, e exactlyonce.Event) (exactlyonce.Result, error) {
	select {
	case <-ctx.Done():
		return exactlyonce.Result{}, ctx.Err()
	case <-time.After(w.delay):
	}
	return exactlyonce.Result{Value: exactlyonce.NewValue()}, nil
}

func (slowWork) Inline() bool { return false }

// runChild is an agent process, as cmd/agent runs one, configured by the functions' variables, with
// leased work of WORK_DELAY per event, leases of LEASE, and its reports of what it settled in the
// file REPORTS. Its log (JSON) goes to stdout, so that a test can wait for what it says.
func runChild(role string) int {
	switch role {
	case "eventworkers":
		return runEventWorkersChild()
	case "processor":
		return runProcessorChild()
	}
	if role != "agent" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	ctx, stop, cfg, store, ok := childStart()
	if !ok {
		return 2
	}
	defer stop()
	rep, err := verify.OpenFileReporter(os.Getenv("REPORTS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	delay, _ := time.ParseDuration(os.Getenv("WORK_DELAY"))
	lease, _ := time.ParseDuration(os.Getenv("LEASE"))
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	a, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: log, Report: rep,
		Lease: lease, Works: exactlyonce.Works{exactlyonce.KindPlain: slowWork{delay}}}, wire.AgentConfigs(cfg, "test", log)[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("started")
	_ = a.Run(ctx)
	if err := rep.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("stopped")
	return 0
}

// cluster is agent processes on one database, each reporting to a file of its own.
type cluster struct {
	t     *testing.T
	dsn   string
	store *wire.Stores
	dir   string
	env   []string
	procs []*child.Process
	files []string
}

func newCluster(t *testing.T, env ...string) *cluster {
	t.Helper()
	db, dsn := testdbDB(t)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	base := []string{"DB_DSN=" + dsn, "SWEEP_GRACE=0", "AGENT_PULSE_INTERVAL=200ms", "AGENT_EXPIRATION=3s",
		"AGENT_POLL_INTERVAL=50ms", "AGENT_BATCH_SIZE=20", "WORK_DELAY=2ms", "LEASE=3s"}
	c := &cluster{t: t, dsn: dsn, store: store, dir: t.TempDir(), env: append(base, env...)}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range c.procs {
				out := p.Output()
				t.Logf("agent-%d's last lines:\n%s", i, strings.Join(out[max(0, len(out)-30):], "\n"))
			}
		}
	})
	return c
}

// start starts one more agent process and returns its index.
func (c *cluster) start() int {
	c.t.Helper()
	return c.startRole("agent")
}

// startRole starts one more process of role (runChild) and returns its index.
func (c *cluster) startRole(role string) int {
	c.t.Helper()
	i := len(c.procs)
	file := filepath.Join(c.dir, fmt.Sprintf("agent-%d.reports", i))
	p := child.Start(c.t, role, append(append([]string(nil), c.env...), "REPORTS="+file, fmt.Sprintf("AGENT_NAME=agent-%d", i))...)
	_, err := p.WaitLine("started", 30*time.Second)
	require.NoError(c.t, err)
	c.procs = append(c.procs, p)
	c.files = append(c.files, file)
	return i
}

// converge waits until the table holds n agents, all RUNNING with shards 0..n-1, and returns them.
func (c *cluster) converge(n int, within time.Duration) []exactlyonce.Agent {
	c.t.Helper()
	var as []exactlyonce.Agent
	require.Eventuallyf(c.t, func() bool {
		var err error
		as, err = c.store.Agents.Agents(context.Background())
		return err == nil && converged(as, n)
	}, within, 10*time.Millisecond, "agents did not converge to %d RUNNING: %+v", n, &as)
	return as
}

// drained waits until no event is open.
func (c *cluster) drained(within time.Duration) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		n, err := mysqltest.CountOpen(context.Background(), c.store.DB.Pool())
		return err == nil && n == 0
	}, within, 20*time.Millisecond)
}

// check runs the exactly-once checker on the table against every agent's reports; killed agents
// may leave up to one batch whose settlement they did not report.
//
// A live agent writes its report of a batch just after the batch's commit, so the table can be
// drained a moment before the last reports are in: the reports are read again until they account
// for every settlement a live agent made (or 10 s pass, and the check fails).
func (c *cluster) check(killed int) {
	c.t.Helper()
	audit, err := mysqltest.AuditEvents(context.Background(), c.store.DB.Pool())
	require.NoError(c.t, err)
	var res verify.Result
	deadline := time.Now().Add(10 * time.Second)
	for {
		ledger := verify.NewLedger()
		for _, f := range c.files {
			require.NoError(c.t, ledger.ReadFile(f))
		}
		res = verify.Check(audit, ledger)
		if res.Unreported <= 20*killed || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the report files for the lines still being written
	}
	require.True(c.t, res.OK(), "%s", res)
	require.Empty(c.t, res.Open)
	require.LessOrEqual(c.t, res.Unreported, 20*killed)
	c.t.Logf("checked: %s", res)
}

func (c *cluster) settledLines(i int) int {
	b, _ := os.ReadFile(c.files[i])
	return strings.Count(string(b), "settled ")
}

// An agent killed with SIGKILL while it holds claims: after its expiration the survivors take its
// range, every event is settled exactly once, and none is left.
func TestAgentKilledWhileHoldingClaims(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for range 4 {
		c.start()
	}
	c.converge(4, 30*time.Second)
	_, err := mysqltest.LoadPending(context.Background(), c.store.DB.Pool(), 3000, nil)
	require.NoError(t, err)
	victim := c.procs[2]
	require.Eventually(t, func() bool { return c.settledLines(2) >= 2 }, 30*time.Second, 5*time.Millisecond)
	victim.Kill()
	killed := time.Now()
	c.converge(3, 30*time.Second)
	t.Logf("the survivors took the killed agent's range %s after SIGKILL (expiration 3s)", time.Since(killed).Round(time.Millisecond))
	c.drained(60 * time.Second)
	c.check(1)
}

// An agent stopped with SIGSTOP past its expiration, then continued: the others eject it and take
// its range; it notices (it logs that it was ejected), claims nothing with its stale view, rejoins
// as a new agent, and no event is settled twice.
func TestAgentStoppedPastItsExpirationRejoins(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for range 3 {
		c.start()
	}
	before := c.converge(3, 30*time.Second)
	_, err := mysqltest.LoadPending(context.Background(), c.store.DB.Pool(), 3000, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.settledLines(1) >= 2 }, 30*time.Second, 5*time.Millisecond)
	victim := c.procs[1]
	require.NoError(t, syscall.Kill(victim.Pid(), syscall.SIGSTOP))
	c.converge(2, 30*time.Second)
	require.NoError(t, syscall.Kill(victim.Pid(), syscall.SIGCONT))
	require.Eventually(t, func() bool {
		for _, l := range victim.Output() {
			if strings.Contains(l, "agent: ejected") {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the continued agent did not notice it was ejected")
	after := c.converge(3, 30*time.Second)
	require.Greater(t, after[2].ID, before[2].ID, "it rejoined as a new agent, last by id")
	c.drained(60 * time.Second)
	c.check(0)
}

// SIGTERM: the agent finishes its batch, deletes its row and exits; the survivor takes its range at
// its next pulse, long before the leaver's expiration (30 s here) would have passed.
func TestAgentSIGTERMHandsOver(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "AGENT_EXPIRATION=30s")
	c.start()
	c.start()
	c.converge(2, 30*time.Second)
	_, err := mysqltest.LoadPending(context.Background(), c.store.DB.Pool(), 2000, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.settledLines(0) >= 2 }, 30*time.Second, 5*time.Millisecond)
	leaver := c.procs[0]
	require.NoError(t, syscall.Kill(leaver.Pid(), syscall.SIGTERM))
	sent := time.Now()
	// 20 s: well before the 30 s expiration, which is what tells a handover from an expiry, and
	// room for a database a parallel suite stalls for seconds (a batch's end, the leaving and the
	// survivor's pulses each wait for it); a passing run takes a pulse or two.
	_, err = leaver.WaitLine("stopped", 20*time.Second)
	require.NoError(t, err, "it exits after its batch")
	as := c.converge(1, 20*time.Second)
	require.Less(t, time.Since(sent), 20*time.Second)
	require.Equal(t, "agent-1", as[0].Name)
	c.drained(60 * time.Second)
	c.check(0)
}

// childStart is how every child role begins: a context that SIGTERM ends, the configuration and
// the store; ok is false, after saying why on stderr, when one of them failed.
func childStart() (context.Context, context.CancelFunc, config.Config, *wire.Stores, bool) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	cfg, err := config.Load(os.Getenv)
	if err == nil {
		var store *wire.Stores
		if store, err = child.OpenStores(); err == nil {
			return ctx, stop, cfg, store, true
		}
	}
	stop()
	fmt.Fprintln(os.Stderr, err)
	return nil, nil, config.Config{}, nil, false
}
