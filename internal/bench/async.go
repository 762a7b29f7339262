package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// asyncTotals accumulates one contender's rounds.
type asyncTotals struct {
	events    int64
	took      time.Duration
	latencies []time.Duration
	reqs      int64
	reqTook   time.Duration
	cpu       map[string]float64 // CPU seconds per process over the contender's windows
}

func (t *asyncTotals) addCPU(used map[string]float64) {
	for k, v := range used {
		t.cpu[k] += v
	}
}

// cpuRow reports the CPU time per event of a contender, summed over the processes measured.
func (t *asyncTotals) cpuRow(group, name string) (Row, bool) {
	if len(t.cpu) == 0 || t.events == 0 {
		return Row{}, false
	}
	total := 0.0
	var parts []string
	for _, p := range []string{"bench", "goaws", "database"} {
		if v, ok := t.cpu[p]; ok {
			us := v / float64(t.events) * 1e6
			total += us
			parts = append(parts, fmt.Sprintf("%s %.0f", p, us))
		}
	}
	return Row{Group: group, Name: name, Value: total, Unit: "us CPU/event",
		Note: strings.Join(parts, ", ") + " (bench: API, processor, mapping and load generator)"}, true
}

func (t *asyncTotals) eps() float64 { return float64(t.events) / t.took.Seconds() }

// runAsync measures the asynchronous path end to end on the local stack: events/s from POST
// /events/async until the processor has given each event its value, and the latency from request
// to processed, beside POST /events's throughput in the same run. Two async contenders: the local
// system's API as the product wires it (one SendMessage per request), and the same API handler with
// the batching sender (internal/sqsbatch). Rounds rotate the order of the three.
func runAsync(ctx context.Context, r *run) error {
	const group = "async"
	const clients = 16
	rounds := pick(r, 3, 1)
	window := pick(r, 4*time.Second, 500*time.Millisecond)
	st, err := r.startStack(ctx, "async")
	if err != nil {
		return err
	}
	defer st.stop()
	client := httpClient(clients)
	defer client.CloseIdleConnections()
	offset, err := dbClockOffset(ctx, st.db)
	if err != nil {
		return err
	}

	post := func(url string) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodPost, url)
		}
	}
	totals := map[string]*asyncTotals{"sync": {cpu: map[string]float64{}}, "async": {cpu: map[string]float64{}}, "batched": {cpu: map[string]float64{}}}
	meter := newCPUMeter(map[string]int{"bench": os.Getpid(), "goaws": st.goawsPID, "database": findProcess("mariadbd", "mysqld")})
	runSync := func(round int) error {
		meter.begin()
		res := load(ctx, client, clients, window, post(st.url+"/events"), nil)
		totals["sync"].addCPU(meter.end())
		if res.failed > 0 {
			return fmt.Errorf("POST /events: %d requests failed: %v", res.failed, res.statuses)
		}
		t := totals["sync"]
		t.events += res.ok
		t.took += res.took
		t.latencies = append(t.latencies, res.latencies...)
		r.progress(group, "round %d/%d sync    POST /events        %7.0f events/s", round+1, rounds, res.rps())
		return nil
	}
	runAsync := func(name, url string) func(int) error {
		return func(round int) error {
			var mu sync.Mutex
			sent := map[int64]time.Time{}
			var decodeErr error
			meter.begin()
			start := time.Now()
			res := load(ctx, client, clients, window, post(url+"/events/async"), func(_ int, at time.Time, body []byte) {
				id, err := decodeID(body)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					decodeErr = err
					return
				}
				sent[id] = at
			})
			if res.failed > 0 || decodeErr != nil {
				return fmt.Errorf("POST /events/async: %d requests failed: %v %v", res.failed, res.statuses, decodeErr)
			}
			if err := r.awaitProcessed(ctx, group, st.db, 5*time.Minute); err != nil {
				return err
			}
			totals[name].addCPU(meter.end())
			last, lat, err := processedSince(ctx, st, sent, offset)
			if err != nil {
				return err
			}
			took := last.Sub(start)
			t := totals[name]
			t.events += int64(len(sent))
			t.took += took
			t.latencies = append(t.latencies, lat...)
			t.reqs += res.ok
			t.reqTook += res.took
			r.progress(group, "round %d/%d %-7s POST /events/async  %7.0f requests/s, %7.0f events/s processed (%d in %.2f s)",
				round+1, rounds, name, res.rps(), float64(len(sent))/took.Seconds(), len(sent), took.Seconds())
			return nil
		}
	}
	steps := []func(int) error{runSync, runAsync("async", st.url), runAsync("batched", st.batchedURL)}
	for round := range rounds {
		for i := range steps {
			if err := steps[(i+round)%len(steps)](round); err != nil {
				return err
			}
		}
	}
	c, err := countEvents(ctx, st.db)
	if err != nil {
		return err
	}
	r.check(group, "every event processed exactly once, ids unique", c.pending == 0 && c.wrong == 0 && c.idsOK(), c.String())

	for _, t := range totals {
		slices.Sort(t.latencies)
	}
	knobs := fmt.Sprintf("%d clients; mapping concurrency %d, batch %d; pool %d", clients, st.mappingConcurrency, st.mappingBatchSize, st.poolSize)
	syncRow := Row{Group: group, Name: "async_sync_eps", Value: totals["sync"].eps(), Unit: "events/s", Note: "POST /events, " + knobs}
	row := func(name, what string) Row {
		t := totals[name]
		return Row{Group: group, Name: fmt.Sprintf("%s_eps", map[string]string{"async": "async", "batched": "async_batched"}[name]),
			Value: t.eps(), Unit: "events/s",
			Note: fmt.Sprintf("%s: POST /events/async until processed (first request to last processed_at); requests alone %.0f/s",
				what, float64(t.reqs)/t.reqTook.Seconds())}
	}
	asyncRow := row("async", "local.Start's API (one SendMessage per request)")
	batchedRow := row("batched", "the API handler with internal/sqsbatch (SendMessageBatch of concurrent requests)")
	lat := func(name, prefix string) []Row {
		l := totals[name].latencies
		return []Row{
			{Group: group, Name: prefix + "_latency_p50_ms", Value: ms(percentile(l, 50)), Unit: "ms"},
			{Group: group, Name: prefix + "_latency_p99_ms", Value: ms(percentile(l, 99)), Unit: "ms"},
		}
	}
	r.add(syncRow, asyncRow, ratio(group, "async_sync_ratio", asyncRow, syncRow, atLeast(0.8), "as the product is wired today"))
	r.add(lat("async", "async")...)
	r.add(batchedRow, ratio(group, "async_batched_sync_ratio", batchedRow, syncRow, atLeast(0.8), "with the batching sender"))
	r.add(lat("batched", "async_batched")...)
	r.add(lat("sync", "async_sync")...)

	// Where the time goes: when the machine's cores are the limit, throughput is inversely
	// proportional to CPU per event, so sync/async CPU is the ceiling of async_sync_ratio here.
	syncCPU, ok1 := totals["sync"].cpuRow(group, "async_cpu_sync_us")
	asyncCPU, ok2 := totals["async"].cpuRow(group, "async_cpu_async_us")
	batchedCPU, ok3 := totals["batched"].cpuRow(group, "async_cpu_batched_us")
	if ok1 && ok2 && ok3 {
		r.add(syncCPU, asyncCPU, batchedCPU,
			ratio(group, "async_cpu_ceiling", syncCPU, asyncCPU, nil,
				"CPU per sync event / CPU per async event: about the async_sync_ratio reachable where the cores are the limit"),
			ratio(group, "async_batched_cpu_ceiling", syncCPU, batchedCPU, nil, "the same with the batching sender"))
	}
	return nil
}

// processedSince reads when each sent event was processed, and returns the last time and the
// latencies from request to processed, on this process's clock. Every sent event must have been
// processed by the processor (the sweeper is kept out of the measurement).
func processedSince(ctx context.Context, st *stack, sent map[int64]time.Time, offset time.Duration) (time.Time, []time.Duration, error) {
	rows, err := st.db.QueryContext(ctx, "SELECT id, processed_at, processed_by FROM events WHERE state = 10 AND processed_by <> 'api'")
	if err != nil {
		return time.Time{}, nil, err
	}
	defer rows.Close()
	var last time.Time
	var lat []time.Duration
	seen, notProcessor := 0, 0
	for rows.Next() {
		var id int64
		var at time.Time
		var by string
		if err := rows.Scan(&id, &at, &by); err != nil {
			return last, nil, err
		}
		t, ok := sent[id]
		if !ok {
			continue // an earlier round's
		}
		seen++
		if by != "processor" {
			notProcessor++
		}
		at = at.Add(-offset)
		lat = append(lat, at.Sub(t))
		if at.After(last) {
			last = at
		}
	}
	if err := rows.Err(); err != nil {
		return last, nil, err
	}
	if seen != len(sent) || notProcessor > 0 {
		return last, nil, fmt.Errorf("%d of %d async events found processed, %d not by the processor", seen, len(sent), notProcessor)
	}
	return last, lat, nil
}
