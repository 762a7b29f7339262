package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// runCount measures what the exact count of events costs (migration 0005, sql/event_counts.sql):
//
//   - GET /events at 16 connections on a database of 1,000,000 events beside one of 1,000, in
//     alternating windows: the count reads its slots, not the history, so the two should match.
//     For scale, the statement it replaced (SELECT COUNT(*) FROM events) is timed on the large one.
//   - the write path, POST /events's Store.CreateProcessed, at 16 and 64 clients, with the count
//     maintained beside without it: one autocommit INSERT per create into a copy of the events
//     table, with ids from memory, which is what a create cost before the count (the allocator
//     costs about nothing: alloc_bare_* against alloc_default_*). And, not judged, the Lambda
//     shape: a store per client, so that no create shares its transaction with another.
func runCount(ctx context.Context, r *run) error {
	const group = "count"
	small, large := pick[int64](r, 1_000, 100), pick[int64](r, 1_000_000, 5_000)
	window := pick(r, time.Second, 200*time.Millisecond)
	readRounds, writeRounds := pick(r, 6, 1), pick(r, 8, 1)

	// Reads.
	serveCount := func(label string, events int64) (string, *sql.DB, func(), error) {
		s, err := r.newScratch(ctx, label, true)
		if err != nil {
			return "", nil, nil, err
		}
		db, err := s.open(20)
		if err != nil {
			s.drop()
			return "", nil, nil, err
		}
		stop := func() { db.Close(); s.drop() }
		t0 := time.Now()
		if _, err := mysql.LoadProcessed(ctx, db, events, func(done int64) {
			if events > 100_000 {
				r.progress(group, "  %s: %d/%d events (%.1f s)", label, done, events, time.Since(t0).Seconds())
			}
		}); err != nil {
			stop()
			return "", nil, nil, fmt.Errorf("load %d events: %w", events, err)
		}
		store, err := mysql.NewStore(db, mysql.StoreConfig{})
		if err != nil {
			stop()
			return "", nil, nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return "", nil, nil, err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: &api.Server{Store: store, Logger: log}}
		go func() { _ = srv.Serve(ln) }()
		return "http://" + ln.Addr().String(), db, func() { _ = srv.Close(); stop() }, nil
	}
	r.progress(group, "loading %d and %d events", small, large)
	smallURL, _, stopSmall, err := serveCount("count_small", small)
	if err != nil {
		return err
	}
	defer stopSmall()
	largeURL, largeDB, stopLarge, err := serveCount("count_large", large)
	if err != nil {
		return err
	}
	defer stopLarge()

	const conns = 16
	client := httpClient(conns)
	defer client.CloseIdleConnections()
	getCount := func(url string) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodGet, url+"/events")
		}
	}
	for _, side := range []struct {
		url  string
		want int64
	}{{smallURL, small}, {largeURL, large}} {
		status, body, err := call(ctx, client, http.MethodGet, side.url+"/events")
		var got struct {
			Count int64 `json:"count"`
		}
		if err == nil {
			err = json.Unmarshal(body, &got)
		}
		r.check(group, fmt.Sprintf("GET /events on %d loaded events answers their number", side.want),
			err == nil && status == http.StatusOK && got.Count == side.want, fmt.Sprintf("status %d, body %.100s, err %v", status, body, err))
	}
	reads := map[string]*loadResult{"small": {statuses: map[int]int64{}}, "large": {statuses: map[int]int64{}}}
	var latencies = map[string][]time.Duration{}
	for round := range readRounds {
		sides := []struct{ name, url string }{{"small", smallURL}, {"large", largeURL}}
		if round%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			res := load(ctx, client, conns, window, getCount(side.url), nil)
			t := reads[side.name]
			t.ok += res.ok
			t.failed += res.failed
			t.took += res.took
			for k, v := range res.statuses {
				t.statuses[k] += v
			}
			latencies[side.name] = append(latencies[side.name], res.latencies...)
			r.progress(group, "round %d/%d GET /events on %-5s %7.0f requests/s, p50 %6.2f ms", round+1, readRounds, side.name,
				res.rps(), ms(percentile(res.latencies, 50)))
		}
	}
	for name, res := range reads {
		r.check(group, fmt.Sprintf("GET /events on the %s database: every request answered 2xx", name),
			res.failed == 0 && res.ok > 0, fmt.Sprintf("statuses %v", res.statuses))
		sort.Slice(latencies[name], func(i, j int) bool { return latencies[name][i] < latencies[name][j] })
	}
	smallRow := Row{Group: group, Name: "count_get_small_c16_rps", Value: reads["small"].rps(), Unit: "requests/s",
		Note: fmt.Sprintf("GET /events, %d events, %d connections, p50 %.2f ms", small, conns, ms(percentile(latencies["small"], 50)))}
	largeRow := Row{Group: group, Name: "count_get_large_c16_rps", Value: reads["large"].rps(), Unit: "requests/s",
		Note: fmt.Sprintf("GET /events, %d events, %d connections, p50 %.2f ms", large, conns, ms(percentile(latencies["large"], 50)))}
	// The statement the count replaced, for scale: the median of 3 scans of the large database.
	var scans []time.Duration
	for range 3 {
		t0 := time.Now()
		var n int64
		if err := largeDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&n); err != nil {
			return err
		}
		scans = append(scans, time.Since(t0))
	}
	sort.Slice(scans, func(i, j int) bool { return scans[i] < scans[j] })
	r.add(smallRow, largeRow,
		ratio(group, "count_get_history_ratio", largeRow, smallRow, atLeast(0.8),
			fmt.Sprintf("GET /events on %d events vs %d, %d rounds of %s", large, small, readRounds, window)),
		Row{Group: group, Name: "count_scan_large_ms", Value: ms(scans[1]), Unit: "ms",
			Note: fmt.Sprintf("SELECT COUNT(*) FROM events on %d events, one client, median of 3: what each GET /events cost before migration 0005", large)})

	// Writes.
	s, err := r.newScratch(ctx, "count_write", true)
	if err != nil {
		return err
	}
	defer s.drop()
	clients := []int{16, 64}
	db, err := s.open(clients[len(clients)-1] + 4)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE bare_events LIKE events"); err != nil {
		return err
	}
	bareInsert := mysql.InsertProcessedInto("bare_events", false)
	var bareID atomic.Int64
	var stores []*mysql.Store
	newStore := func() (*mysql.Store, error) {
		st, err := mysql.NewStore(db, mysql.StoreConfig{})
		stores = append(stores, st)
		return st, err
	}
	for _, c := range clients {
		shared, err := newStore()
		if err != nil {
			return err
		}
		perClient := make([]*mysql.Store, c)
		for i := range perClient {
			if perClient[i], err = newStore(); err != nil {
				return err
			}
		}
		contenders := []*contender{
			{name: "uncounted", create: func(ctx context.Context) error {
				_, err := db.ExecContext(ctx, bareInsert, bareID.Add(1), exactlyonce.NewValue())
				return err
			}},
			{name: "counted", create: func(ctx context.Context) error {
				_, err := shared.CreateProcessed(ctx, exactlyonce.NewValue())
				return err
			}},
			{name: "lambda"}, // client i creates through perClient[i]
		}
		run := func(ct *contender, d time.Duration) (int64, time.Duration, error) {
			if ct.name != "lambda" {
				return window1(ctx, c, d, ct.create)
			}
			return windowEach(ctx, c, d, func(ctx context.Context, client int) error {
				_, err := perClient[client].CreateProcessed(ctx, exactlyonce.NewValue())
				return err
			})
		}
		for _, ct := range contenders {
			if _, _, err := run(ct, 100*time.Millisecond); err != nil {
				return fmt.Errorf("%s warm-up: %w", ct.name, err)
			}
		}
		done := map[string]int64{}
		took := map[string]time.Duration{}
		for round := range writeRounds {
			for i := range contenders {
				ct := contenders[(i+round)%len(contenders)]
				n, d, err := run(ct, window)
				if err != nil {
					return fmt.Errorf("%s at %d clients: %w", ct.name, c, err)
				}
				done[ct.name] += n
				took[ct.name] += d
				if r.smoke() || round == writeRounds-1 || (round+1)%4 == 0 {
					r.progress(group, "%2d clients, round %d/%d, %-9s %8.0f events/s", c, round+1, writeRounds, ct.name, float64(n)/d.Seconds())
				}
			}
		}
		rate := func(name, note string) Row {
			return Row{Group: group, Name: fmt.Sprintf("count_write_%s_c%d_eps", name, c),
				Value: float64(done[name]) / took[name].Seconds(), Unit: "events/s", Note: note}
		}
		unc := rate("uncounted", "one autocommit INSERT per create into a copy of events, ids from memory: a create before the count")
		cnt := rate("counted", "Store.CreateProcessed, one store for all clients (as one process serves them): concurrent creates share one transaction, INSERT and count update, in one round trip")
		lam := rate("lambda", "Store.CreateProcessed, one store per client (the Lambda shape): each create its own transaction, one round trip")
		r.progress(group, "%2d clients: counted %.2fx, Lambda shape %.2fx the uncounted write", c, cnt.Value/unc.Value, lam.Value/unc.Value)
		r.add(unc, cnt, lam,
			ratio(group, fmt.Sprintf("count_write_ratio_c%d", c), cnt, unc, atLeast(0.9), ""),
			ratio(group, fmt.Sprintf("count_write_lambda_ratio_c%d", c), lam, unc, nil, "not judged: every create pays the count's statement and its transaction alone"))
	}
	for _, st := range stores {
		if sn := st.Stats(); sn.GaveUp > 0 {
			r.check(group, "write transactions", false, fmt.Sprintf("%+v", sn))
		}
	}
	var rows int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&rows); err != nil {
		return err
	}
	n, err := stores[0].Count(ctx)
	if err != nil {
		return err
	}
	r.check(group, "the count equals the events stored", n == rows && rows > 0, fmt.Sprintf("count %d, rows %d", n, rows))
	return nil
}

// windowEach is window1 for creates that need to know their client: client i (0..clients-1), one
// goroutine, calls create(ctx, i) until d has passed.
func windowEach(ctx context.Context, clients int, d time.Duration, create func(context.Context, int) error) (int64, time.Duration, error) {
	var (
		n       atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	end := start.Add(d)
	for client := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := create(ctx, client); err != nil {
					errOnce.Do(func() { first = err; cancel() })
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(start), first
}
