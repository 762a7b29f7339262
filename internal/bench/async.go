package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
)

// asyncTotals accumulates one contender's rounds.
type asyncTotals struct {
	events    int64
	took      time.Duration
	latencies []time.Duration
	reqs      int64
	reqTook   time.Duration
	cpu       map[string]float64 // CPU seconds per process over the contender's windows
	// messages and batches are what the local event source mapping received and handed over.
	messages, batches int64
}

// addRound adds one counted round: the CPU each process used, the events done and the time
// they took, and their latencies.
func (t *asyncTotals) addRound(used map[string]float64, events int64, took time.Duration, lat []time.Duration) {
	if t.cpu == nil {
		t.cpu = map[string]float64{}
	}
	for k, v := range used {
		t.cpu[k] += v
	}
	t.events += events
	t.took += took
	t.latencies = append(t.latencies, lat...)
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

// asyncContender is a way of serving POST /events/async: its name in progress lines, the prefix
// of its rows, what it is and the shape of its messages, and the URL of the stack's API serving it.
type asyncContender struct {
	name, prefix, what, shape string
	url                       func(*stack) string
}

// unjudgedAsync are the contenders measured beside the judged one at the first client count only:
// what the local wiring's choices are worth. prefix names their rows.
var unjudgedAsync = []asyncContender{
	{"aftersend", "async_after_send",
		"the same grouping, each request answered only after its group's message is sent (ASYNC_LINGER=0)",
		"a message per group of waiting requests", func(st *stack) string { return st.afterSendURL }},
	{"lambda", "async_lambda_shape",
		"the same API handler storing and queueing each request on its own, as a Lambda does",
		"one INSERT and one SendMessage per request", func(st *stack) string { return st.lambdaURL }},
}

// asyncClients are the client counts the async group measures at, like the allocation targets: the
// async target holds only if it holds at each.
var asyncClients = []int{16, 64}

// runAsync measures the asynchronous path end to end on the local stack: events/s from POST
// /events/async until the processor has given each event its value, and the latency from request
// to processed, beside POST /events's throughput in the same run, at 16 and at 64 clients. At 16
// clients two more contenders, not judged, show what the local wiring's choices are worth: the
// same grouping answering each request only after its message is sent, and the Lambda shape, the
// same API handler storing and queueing each request on its own (one INSERT and one SendMessage per
// request), which is what a Lambda execution environment does, as it serves one request at a time.
// Each contender first runs a short warm-up window that is not counted; then rounds rotate the
// order of the contenders.
func runAsync(ctx context.Context, r *run) error {
	const group = "async"
	rounds := pick(r, 3, 1)
	window := pick(r, 4*time.Second, 500*time.Millisecond)
	warmup := pick(r, time.Second, 100*time.Millisecond)
	st, err := r.startStack(ctx, "async")
	if err != nil {
		return err
	}
	defer st.stop()
	offset, err := dbClockOffset(ctx, st.db)
	if err != nil {
		return err
	}
	meter := newCPUMeter(map[string]int{"bench": os.Getpid(), "goaws": st.goawsPID, "database": databasePID(ctx, st.db)})
	post := func(url string) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodPost, url)
		}
	}
	var judged []Row
	for _, clients := range asyncClients {
		client := httpClient(clients)
		var unjudged []asyncContender
		if clients == asyncClients[0] {
			unjudged = unjudgedAsync
		}
		totals := map[string]*asyncTotals{"sync": {}, "async": {}}
		for _, u := range unjudged {
			totals[u.name] = &asyncTotals{}
		}
		// A round of -1 is the warm-up: a short window per contender, not counted, so that no
		// contender's first round pays for opening connections, growing pools and heaps, or the
		// previous group's writes still being flushed.
		windowOf := func(round int) time.Duration {
			if round < 0 {
				return warmup
			}
			return window
		}
		runSync := func(round int) error {
			meter.begin()
			res := load(ctx, client, clients, windowOf(round), post(st.url+"/events"), nil)
			used := meter.end()
			if res.failed > 0 {
				return fmt.Errorf("POST /events: %d requests failed: %v", res.failed, res.statuses)
			}
			if round < 0 {
				return nil
			}
			totals["sync"].addRound(used, res.ok, res.took, res.latencies)
			r.progress(group, "c%d round %d/%d sync    POST /events        %7.0f events/s; %s", clients, round+1, rounds, res.rps(), cpuSummary(used, res.took))
			return nil
		}
		runAsync := func(name, url string) func(int) error {
			return func(round int) error {
				var mu sync.Mutex
				sent := map[int64]time.Time{}
				var decodeErr error
				batches0, received0, _, _, _ := st.sys.MappingStats()
				meter.begin()
				start := time.Now()
				res := load(ctx, client, clients, windowOf(round), post(url+"/events/async"), func(_ int, at time.Time, body []byte) {
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
				used, elapsed := meter.end(), time.Since(start)
				if round < 0 {
					return nil
				}
				batches1, received1, _, _, _ := st.sys.MappingStats()
				last, lat, err := processedSince(ctx, st, sent, offset)
				if err != nil {
					return err
				}
				took := last.Sub(start)
				t := totals[name]
				t.addRound(used, int64(len(sent)), took, lat)
				t.reqs += res.ok
				t.reqTook += res.took
				t.messages += received1 - received0
				t.batches += batches1 - batches0
				r.progress(group, "c%d round %d/%d %-7s POST /events/async  %7.0f requests/s, %7.0f events/s processed (%d in %.2f s); %s",
					clients, round+1, rounds, name, res.rps(), float64(len(sent))/took.Seconds(), len(sent), took.Seconds(), cpuSummary(used, elapsed))
				return nil
			}
		}
		steps := []func(int) error{runSync, runAsync("async", st.url)}
		for _, u := range unjudged {
			steps = append(steps, runAsync(u.name, u.url(st)))
		}
		r.progress(group, "c%d warm-up: %s per contender, not counted", clients, warmup)
		for _, step := range steps {
			if err := step(-1); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		for round := range rounds {
			for i := range steps {
				if err := steps[(i+round)%len(steps)](round); err != nil {
					return err
				}
			}
		}
		client.CloseIdleConnections()
		for _, t := range totals {
			slices.Sort(t.latencies)
		}

		c := fmt.Sprintf("_c%d", clients)
		knobs := fmt.Sprintf("%d clients; mapping concurrency %d, batch %d; pool %d", clients, stackMappingConcurrency, stackMappingBatchSize, stackPoolSize)
		syncRow := Row{Group: group, Name: "async_sync_eps" + c, Value: totals["sync"].eps(), Unit: "events/s", Note: "POST /events, " + knobs}
		lat := func(name, prefix string) []Row {
			l := totals[name].latencies
			return []Row{
				{Group: group, Name: prefix + "_latency_p50_ms" + c, Value: ms(percentile(l, 50)), Unit: "ms"},
				{Group: group, Name: prefix + "_latency_p99_ms" + c, Value: ms(percentile(l, 99)), Unit: "ms"},
			}
		}
		asyncRow := totals["async"].row(group, "async_eps"+c,
			"local.Start's API: concurrent requests share one INSERT, each is answered on commit, and a message names the events committed within ASYNC_LINGER (api.AsyncGroup)")
		judged = append(judged, ratio(group, "async_sync_ratio"+c, asyncRow, syncRow, atLeast(0.8), "as the product is wired"))
		r.add(syncRow, asyncRow, judged[len(judged)-1])
		r.add(lat("async", "async")...)
		r.add(lat("sync", "async_sync")...)
		for _, u := range unjudged {
			row := totals[u.name].row(group, u.prefix+"_eps"+c, u.what)
			r.add(row, ratio(group, u.prefix+"_sync_ratio"+c, row, syncRow, nil, u.shape))
			r.add(lat(u.name, u.prefix)...)
		}

		// Where the time goes: when the machine's cores are the limit, throughput is inversely
		// proportional to CPU per event, so sync/async CPU is the ceiling of the ratio here.
		syncCPU, ok := totals["sync"].cpuRow(group, "async_cpu_sync_us"+c)
		if !ok {
			continue
		}
		r.add(syncCPU)
		for _, u := range append([]asyncContender{{name: "async", prefix: "async"}}, unjudged...) {
			if cpu, ok := totals[u.name].cpuRow(group, u.prefix+"_cpu_us"+c); ok {
				r.add(cpu, ratio(group, u.prefix+"_cpu_ceiling"+c, syncCPU, cpu, nil,
					"CPU per sync event / CPU per async event: about the ratio reachable where the cores are the limit"))
			}
		}
	}
	if err := r.verifySettled(ctx, group, st); err != nil {
		return err
	}

	// The target holds only if it holds at every client count, as for allocation.
	worst := judged[0]
	for _, j := range judged[1:] {
		if j.Value < worst.Value {
			worst = j
		}
	}
	r.add(Row{Group: group, Name: "async_sync_ratio", Value: worst.Value, Unit: "x", Reference: worst.Reference,
		ReferenceValue: worst.ReferenceValue, goal: atLeast(0.8), Note: "the lower of " + judgedNames(judged)})
	return nil
}

func judgedNames(rows []Row) string {
	var names []string
	for _, r := range rows {
		names = append(names, fmt.Sprintf("%s (%.2f)", r.Name, r.Value))
	}
	return strings.Join(names, " and ")
}

// row reports an async contender's throughput, with how its events were grouped.
func (t *asyncTotals) row(group, name, what string) Row {
	shape := ""
	if t.messages > 0 && t.batches > 0 {
		shape = fmt.Sprintf("; %.1f events per message, %.1f messages per processor batch",
			float64(t.events)/float64(t.messages), float64(t.messages)/float64(t.batches))
	}
	return Row{Group: group, Name: name, Value: t.eps(), Unit: "events/s",
		Note: fmt.Sprintf("%s: POST /events/async until processed (first request to last processed_at); requests alone %.0f/s%s",
			what, float64(t.reqs)/t.reqTook.Seconds(), shape)}
}

// processedSince reads when each sent event was processed, and returns the last time and the
// latencies from request to processed, on this process's clock. Every sent event must have been
// processed by the processor (the sweeper is kept out of the measurement).
func processedSince(ctx context.Context, st *stack, sent map[int64]time.Time, offset time.Duration) (time.Time, []time.Duration, error) {
	// Only this round's ids: earlier rounds' rows would be read only to be skipped.
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for id := range sent {
		lo, hi = min(lo, id), max(hi, id)
	}
	processed, err := mysqltest.ProcessedAsync(ctx, st.db, lo, hi)
	if err != nil {
		return time.Time{}, nil, err
	}
	var last time.Time
	var lat []time.Duration
	seen, notProcessor := 0, 0
	for _, p := range processed {
		t, ok := sent[p.ID]
		if !ok {
			continue // an earlier round's
		}
		seen++
		if p.By != "processor" {
			notProcessor++
		}
		at := p.At.Add(-offset)
		lat = append(lat, at.Sub(t))
		if at.After(last) {
			last = at
		}
	}
	if seen != len(sent) || notProcessor > 0 {
		return last, nil, fmt.Errorf("%d of %d async events found processed, %d not by the processor", seen, len(sent), notProcessor)
	}
	return last, lat, nil
}
