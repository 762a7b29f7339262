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
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// runCount measures what the exact count of events costs (migrations/0005_settled_count.sql):
//
//   - GET /events at 16 connections on a database of 1,000,000 events beside one of 1,000, in
//     alternating windows, both folded (as the sweeper leaves them): the count reads one row and
//     scans only what is pending or settled since the last fold, so the two should match. The fold
//     of the million is timed (events/s), and for scale the statement the count replaced
//     (SELECT COUNT(*) FROM events) is timed on the large database.
//   - the write path, POST /events's Store.CreateProcessed, at 16 and 64 clients, with a folder
//     running beside it (a loop of FoldSettled that pauses 100 ms when nothing is left: a sweeper
//     folding far more often than the real one) beside the same writes without, in alternating
//     windows; what one window wrote is folded before the next one, untimed.
func runCount(ctx context.Context, r *run) error {
	const group = "count"
	if err := countReads(ctx, r, group); err != nil {
		return err
	}
	return countWrites(ctx, r, group)
}

func countReads(ctx context.Context, r *run, group string) error {
	small, large := pick[int64](r, 1_000, 100), pick[int64](r, 1_000_000, 5_000)
	window := pick(r, time.Second, 200*time.Millisecond)
	rounds := pick(r, 6, 1)

	type side struct {
		name, url string
		events    int64
		db        *sql.DB
	}
	serve := func(name string, events int64) (side, func(), error) {
		s, err := r.newScratch(ctx, "count_"+name, true)
		if err != nil {
			return side{}, nil, err
		}
		db, err := s.open(20)
		if err != nil {
			s.drop()
			return side{}, nil, err
		}
		stop := func() { db.Close(); s.drop() }
		t0 := time.Now()
		if _, err := mysqltest.LoadProcessed(ctx, db, events, func(done int64) {
			if events > 100_000 {
				r.progress(group, "  %s: loaded %d/%d events (%.1f s)", name, done, events, time.Since(t0).Seconds())
			}
		}); err != nil {
			stop()
			return side{}, nil, fmt.Errorf("load %d events: %w", events, err)
		}
		store, err := wire.StoresOn(db, mysql.Config{})
		if err != nil {
			stop()
			return side{}, nil, err
		}
		t0 = time.Now()
		folded, err := foldAll(ctx, store)
		if err != nil {
			stop()
			return side{}, nil, err
		}
		took := time.Since(t0)
		r.check(group, fmt.Sprintf("the fold of %d loaded events folds each once", events), folded == events,
			fmt.Sprintf("folded %d", folded))
		if events == large {
			r.add(Row{Group: group, Name: "count_fold_eps", Value: float64(folded) / took.Seconds(), Unit: "events/s",
				Note: fmt.Sprintf("FoldSettled in batches of %d, one client: %d settled events into the count in %.1f s", eventstore.DefaultFoldBatch, folded, took.Seconds())})
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return side{}, nil, err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		srv := httpserver.New(&api.Server{Stores: store.API(), Logger: log})
		go func() { _ = srv.Serve(ln) }()
		return side{name: name, url: "http://" + ln.Addr().String(), events: events, db: db},
			func() { _ = srv.Close(); stop() }, nil
	}
	r.progress(group, "loading and folding %d and %d events", small, large)
	smallSide, stopSmall, err := serve("small", small)
	if err != nil {
		return err
	}
	defer stopSmall()
	largeSide, stopLarge, err := serve("large", large)
	if err != nil {
		return err
	}
	defer stopLarge()

	const conns = 16
	client := httpClient(conns)
	defer client.CloseIdleConnections()
	for _, sd := range []side{smallSide, largeSide} {
		status, body, err := call(ctx, client, http.MethodGet, sd.url+"/events")
		var got struct {
			Count int64 `json:"count"`
		}
		if err == nil {
			err = json.Unmarshal(body, &got)
		}
		r.check(group, fmt.Sprintf("GET /events on %d loaded events answers their number", sd.events),
			err == nil && status == http.StatusOK && got.Count == sd.events, fmt.Sprintf("status %d, body %.100s, err %v", status, body, err))
	}
	total := map[string]*loadResult{"small": {statuses: map[int]int64{}}, "large": {statuses: map[int]int64{}}}
	latencies := map[string][]time.Duration{}
	for round := range rounds {
		sides := []side{smallSide, largeSide}
		if round%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, sd := range sides {
			url := sd.url + "/events"
			res := load(ctx, client, conns, window, func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
				return call(ctx, c, http.MethodGet, url)
			}, nil)
			t := total[sd.name]
			t.ok += res.ok
			t.failed += res.failed
			t.took += res.took
			for k, v := range res.statuses {
				t.statuses[k] += v
			}
			latencies[sd.name] = append(latencies[sd.name], res.latencies...)
			r.progress(group, "round %d/%d GET /events on %-5s %7.0f requests/s, p50 %6.2f ms", round+1, rounds, sd.name,
				res.rps(), ms(percentile(res.latencies, 50)))
		}
	}
	rows := map[string]Row{}
	for _, sd := range []side{smallSide, largeSide} {
		res := total[sd.name]
		r.check(group, fmt.Sprintf("GET /events on the %s database: every request answered 2xx", sd.name),
			res.failed == 0 && res.ok > 0, fmt.Sprintf("statuses %v", res.statuses))
		lat := latencies[sd.name]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		rows[sd.name] = Row{Group: group, Name: fmt.Sprintf("count_get_%s_c16_rps", sd.name), Value: res.rps(), Unit: "requests/s",
			Note: fmt.Sprintf("GET /events, %d events, %d connections, p50 %.2f ms", sd.events, conns, ms(percentile(lat, 50)))}
	}
	// The statement the count replaced, for scale: the median of 3 scans of the large database.
	var scans []time.Duration
	for range 3 {
		t0 := time.Now()
		var n int64
		if err := largeSide.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&n); err != nil {
			return err
		}
		scans = append(scans, time.Since(t0))
	}
	sort.Slice(scans, func(i, j int) bool { return scans[i] < scans[j] })
	r.add(rows["small"], rows["large"],
		ratio(group, "count_get_history_ratio", rows["large"], rows["small"], atLeast(0.8),
			fmt.Sprintf("GET /events on %d events vs %d, %d rounds of %s", large, small, rounds, window)),
		Row{Group: group, Name: "count_scan_large_ms", Value: ms(scans[1]), Unit: "ms",
			Note: fmt.Sprintf("SELECT COUNT(*) FROM events on %d events, one client, median of 3: what every GET /events cost before migration 0005", large)})
	return nil
}

func countWrites(ctx context.Context, r *run, group string) error {
	window := pick(r, time.Second, 200*time.Millisecond)
	rounds := pick(r, 8, 1)
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
	store, err := wire.StoresOn(db, mysql.Config{})
	if err != nil {
		return err
	}
	create := func(ctx context.Context) error {
		_, err := store.Events.CreateProcessed(ctx, exactlyonce.NewValue())
		return err
	}
	var folded int64
	// withFolder runs a window of creates with a folder beside it, as a sweeper would fold them.
	withFolder := func(c int, d time.Duration) (int64, time.Duration, error) {
		fctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var ferr error
		wg.Go(func() {
			for fctx.Err() == nil {
				n, err := store.Events.FoldSettled(fctx, eventstore.DefaultFoldBatch)
				folded += n
				if err != nil {
					if fctx.Err() == nil {
						ferr = err
					}
					return
				}
				if n < eventstore.DefaultFoldBatch {
					select {
					case <-fctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		})
		n, took, err := window1(ctx, c, d, create)
		stop()
		wg.Wait()
		if err == nil {
			err = ferr
		}
		return n, took, err
	}
	contenders := []struct {
		name string
		run  func(c int, d time.Duration) (int64, time.Duration, error)
	}{
		{"plain", func(c int, d time.Duration) (int64, time.Duration, error) { return window1(ctx, c, d, create) }},
		{"folded", withFolder},
	}
	for _, c := range clients {
		for _, ct := range contenders {
			if _, _, err := ct.run(c, 100*time.Millisecond); err != nil {
				return fmt.Errorf("%s warm-up: %w", ct.name, err)
			}
		}
		done := map[string]int64{}
		took := map[string]time.Duration{}
		for round := range rounds {
			for i := range contenders {
				ct := contenders[(i+round)%len(contenders)]
				// What the last window left unfolded is folded now, untimed, so that each window's
				// folder folds only its own window's events.
				n, err := foldAll(ctx, store)
				if err != nil {
					return err
				}
				folded += n
				n, d, err := ct.run(c, window)
				if err != nil {
					return fmt.Errorf("%s at %d clients: %w", ct.name, c, err)
				}
				done[ct.name] += n
				took[ct.name] += d
				if r.smoke() || round == rounds-1 || (round+1)%4 == 0 {
					r.progress(group, "%2d clients, round %d/%d, %-6s %8.0f events/s", c, round+1, rounds, ct.name, float64(n)/d.Seconds())
				}
			}
		}
		rate := func(name, note string) Row {
			return Row{Group: group, Name: fmt.Sprintf("count_write_%s_c%d_eps", name, c),
				Value: float64(done[name]) / took[name].Seconds(), Unit: "events/s", Note: note}
		}
		plain := rate("plain", "Store.CreateProcessed, nothing folding")
		withFold := rate("folded", "Store.CreateProcessed with a folder beside it (FoldSettled in a loop, 100 ms pause when nothing is left)")
		r.add(plain, withFold, ratio(group, fmt.Sprintf("count_write_ratio_c%d", c), withFold, plain, atLeast(0.9), ""))
	}
	n, err := foldAll(ctx, store)
	if err != nil {
		return err
	}
	folded += n
	var rows int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&rows); err != nil {
		return err
	}
	count, err := store.Events.Count(ctx)
	if err != nil {
		return err
	}
	r.check(group, "the count equals the events stored, and every event was folded once",
		count == rows && folded == rows && rows > 0, fmt.Sprintf("count %d, rows %d, folded %d", count, rows, folded))
	if sn := store.DB.Stats(); sn.GaveUp > 0 {
		r.check(group, "write and fold transactions", false, fmt.Sprintf("%+v", sn))
	}
	return nil
}

// foldAll folds every settled event into the count and returns how many it folded.
func foldAll(ctx context.Context, store *wire.Stores) (int64, error) {
	var total int64
	for {
		n, err := store.Events.FoldSettled(ctx, eventstore.DefaultFoldBatch)
		total += n
		if err != nil || n < eventstore.DefaultFoldBatch {
			return total, err
		}
	}
}
