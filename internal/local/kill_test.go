package local_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// settleWithin bounds the wait for everything to settle after the last kill: a task leased by a
// killed runner is claimed again once its lease (processing.DefaultLease, 2 minutes) has run out.
const settleWithin = processing.DefaultLease + time.Minute

// killCreate is one create as its client saw it.
type killCreate struct {
	kind  string // sync, async, task
	key   string
	ref   string
	seq   int
	body  []byte
	acked bool
	id    int64
	first []byte // a keyed create's acknowledged answer
	cut   bool   // sent, and no answer came (the connection cut by a kill)
}

// Invariant: the local runner as `make run` runs it (bin/local: the API, its outbox, the processor
// and the sweeper in one process) killed with SIGKILL again and again while clients create sync
// events, async events and tasks, with and without an Idempotency-Key, loses, duplicates and
// jams nothing: every create answered 2xx is one event; every key sent again until acknowledged
// is one event, and answered the same once more; every async event acknowledged is settled once
// (its message, unsent in the killed outbox, made up for by the sweeper); every task is delivered
// at least once and, per reference, first delivered in creation order; the count is the events'.
// internal/chaos kills the API, processor and sweeper as separate processes; this kills them all
// at once, as a crash of `make run` does.
func TestLocalRunnerKilledWhileCreating(t *testing.T) {
	if os.Getenv("CHAOS_LOCAL") == "" {
		t.Skip("a soak of over two minutes (the leases of the killed runners' tasks run out): make chaos-local")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_LOCAL_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (CHAOS_LOCAL_SEED=%d reproduces the kill points' draws)", seed, seed)
	cfg, sdb := server(t)
	name := unusedName(t, sdb)
	_, err := sdb.Exec("CREATE DATABASE `" + name + "`")
	require.NoError(t, err)
	sqsURL, _ := endpoint(t)

	// The receiver: every delivery, by webhook-id, in arrival order per reference.
	var rmu sync.Mutex
	deliveries := map[string]int{}
	firstOrder := map[string][]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var p struct {
			Ref string `json:"ref"`
			Seq int    `json:"seq"`
		}
		_ = json.Unmarshal(b, &p)
		id := r.Header.Get("webhook-id")
		rmu.Lock()
		if deliveries[id] == 0 {
			firstOrder[p.Ref] = append(firstOrder[p.Ref], p.Seq)
		}
		deliveries[id]++
		rmu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	base := "http://" + addr
	env := runnerEnv(sqsURL, "HTTP_ADDR="+addr, "DB_DSN="+dsnOn(cfg, name), "SWEEP_GRACE=1s", "IDEMPOTENCY_WAIT=2s", "LOG_LEVEL=error")

	var cmd *exec.Cmd
	var out bytes.Buffer
	start := func() {
		cmd = exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		testutil.Eventually(t, 30*time.Second, "the runner answers", func() bool {
			resp, err := http.Get(base + "/events")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	kill := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	start()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			_ = cmd.Wait()
		}
	})

	hc := &http.Client{Timeout: 20 * time.Second}
	post := func(c *killCreate) (int, []byte, error) {
		path := "/events"
		if c.kind != "sync" {
			path = "/events/async"
		}
		req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	// send sends c once (no key) or until acknowledged (a key), within 60 s.
	send := func(c *killCreate) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			status, b, err := post(c)
			if err == nil && (status == http.StatusCreated || status == http.StatusAccepted) {
				var a struct{ ID int64 }
				if json.Unmarshal(b, &a) == nil && a.ID > 0 {
					c.acked, c.id, c.first = true, a.ID, b
					return
				}
			}
			if err == nil && status < 500 && status != http.StatusConflict && status != http.StatusTooManyRequests {
				t.Errorf("create %+v answered %d %s", c.kind, status, b)
				return
			}
			if c.key == "" {
				c.cut = err != nil
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("the keyed create %s was never acknowledged: %d %v", c.key, status, err)
				return
			}
			time.Sleep(20 * time.Millisecond) // the runner is being restarted
		}
	}

	const clients, kills = 6, 10
	var acks atomic.Int64
	stop := make(chan struct{})
	results := make([][]*killCreate, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed+uint64(i), 7))
			seqs := map[string]int{}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c := &killCreate{}
				switch rng.IntN(3) {
				case 0:
					c.kind = "sync"
				case 1:
					c.kind = "async"
				default:
					// A task: only keyed, so that every task of a reference is known to exist and its
					// order is the order of its creates' acknowledgements.
					c.kind, c.ref = "task", fmt.Sprintf("c%d-r%d", i, rng.IntN(2))
					c.seq = seqs[c.ref]
					seqs[c.ref]++
					payload, _ := json.Marshal(map[string]any{"ref": c.ref, "seq": c.seq})
					c.body, _ = json.Marshal(map[string]any{"url": recv.URL, "payload": json.RawMessage(payload), "referenceId": c.ref, "maxRetries": 25})
				}
				if c.kind == "task" || rng.IntN(2) == 0 {
					c.key = fmt.Sprintf("kill-%d-%d", i, n)
				}
				send(c)
				if c.acked {
					acks.Add(1)
				} else if c.key == "" && !c.cut {
					time.Sleep(20 * time.Millisecond) // refused: the runner is being restarted
				}
				results[i] = append(results[i], c)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	for range kills {
		target := acks.Load() + 40 + int64(rng.IntN(120))
		testutil.Eventually(t, 60*time.Second, "more creates acknowledged", func() bool { return acks.Load() >= target })
		kill()
		start()
	}
	target := acks.Load() + 50
	testutil.Eventually(t, 60*time.Second, "creates acknowledged after the last restart", func() bool { return acks.Load() >= target })
	close(stop)
	wg.Wait()

	getJSON := func(path string, v any) int {
		resp, err := hc.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		if v != nil {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
		}
		return resp.StatusCode
	}

	// Everything settles: nothing pending, queued or processing is left.
	settled := func() bool {
		var o struct {
			Events map[string]int64 `json:"events"`
		}
		getJSON("/overview", &o)
		return o.Events["pending"] == 0 && o.Events["processing"] == 0 && o.Events["queued"] == 0
	}
	for deadline := time.Now().Add(settleWithin); !settled(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			for _, s := range []string{"pending", "processing", "queued"} {
				var l struct{ Events []json.RawMessage }
				getJSON("/events?state="+s, &l)
				for _, e := range l.Events {
					t.Logf("left %s: %s", s, e)
				}
			}
			var o json.RawMessage
			getJSON("/overview", &o)
			t.Fatalf("not settled within %s: %s", settleWithin, o)
		}
	}

	ids := map[int64]*killCreate{}
	keyed, cut, total := 0, 0, 0
	for _, rs := range results {
		for _, c := range rs {
			total++
			if c.cut {
				cut++
			}
			if !c.acked {
				continue
			}
			if prev, dup := ids[c.id]; dup {
				t.Errorf("id %d answered to two creates (%+v, %+v)", c.id, prev, c)
			}
			ids[c.id] = c
			var e struct {
				State        string
				ProcessCount int
				Kind         string
				IsCompleted  bool
			}
			require.Equal(t, http.StatusOK, getJSON(fmt.Sprintf("/events/%d", c.id), &e), "event %d", c.id)
			switch c.kind {
			case "task":
				if e.State != "completed" {
					t.Errorf("task %d is %s", c.id, e.State)
				}
				rmu.Lock()
				d := deliveries[fmt.Sprintf("task_%d", c.id)]
				rmu.Unlock()
				if d == 0 {
					t.Errorf("task %d was never delivered", c.id)
				}
			default:
				if e.State != "processed" || e.ProcessCount != 1 {
					t.Errorf("event %d (%s) is %s, processed %d times", c.id, c.kind, e.State, e.ProcessCount)
				}
			}
			if c.key != "" {
				keyed++
				if keyed <= 100 {
					status, b, err := post(c)
					require.NoError(t, err)
					var a, f struct{ ID int64 }
					require.NoError(t, json.Unmarshal(b, &a))
					require.NoError(t, json.Unmarshal(c.first, &f))
					if status/100 != 2 || a.ID != f.ID {
						t.Errorf("key %s sent again: %d %s, first %s", c.key, status, b, c.first)
					}
				}
			}
		}
	}
	// Per reference, the first deliveries in creation order.
	rmu.Lock()
	for ref, seqs := range firstOrder {
		for i, s := range seqs {
			if s != i {
				t.Errorf("reference %s first delivered in the order %v", ref, seqs)
				break
			}
		}
	}
	rmu.Unlock()
	// The count: the acknowledged events, and at most one for each create whose answer was cut.
	var count struct{ Count int64 }
	require.Equal(t, http.StatusOK, getJSON("/events", &count))
	if count.Count < int64(len(ids)) || count.Count > int64(len(ids)+cut) {
		t.Errorf("GET /events counts %d; %d acknowledged, %d cut", count.Count, len(ids), cut)
	}
	var stored int64
	require.NoError(t, sdb.QueryRow("SELECT COUNT(*) FROM `"+name+"`.idempotency_keys").Scan(&stored))
	var distinct int64
	require.NoError(t, sdb.QueryRow("SELECT COUNT(DISTINCT key_hash) FROM `"+name+"`.idempotency_keys").Scan(&distinct))
	if stored != distinct {
		t.Errorf("%d keys stored, %d distinct", stored, distinct)
	}
	rmu.Lock()
	t.Logf("%d kills; %d creates (%d acknowledged, %d keyed, %d cut); count %d; %d tasks delivered", kills, total, len(ids), keyed, cut, count.Count, len(deliveries))
	rmu.Unlock()
}
