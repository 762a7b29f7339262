package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
)

// runAPI puts each endpoint under load with the load generator, at 16 and 64 connections, on the
// local stack, and reports requests/s and latency. The reads run against a table preloaded with
// processed events (and whatever the writes of earlier phases added); every read is a scan, as the
// schema rules make it, so its cost grows with the table: the notes say how many rows there were.
func runAPI(ctx context.Context, r *run) error {
	const group = "api"
	preload := pick[int64](r, 10_000, 1_000)
	window := pick(r, 3*time.Second, 300*time.Millisecond)
	st, err := r.startStack(ctx, "api")
	if err != nil {
		return err
	}
	defer st.stop()
	first, err := mysqltest.LoadProcessed(ctx, st.db, preload, nil)
	if err != nil {
		return err
	}
	randomID := func() int64 { return first + rand.Int64N(preload) }

	endpoints := []struct {
		name, label string
		req         request
	}{
		{"get_event", "GET /events/{id}", func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodGet, st.url+"/events/"+strconv.FormatInt(randomID(), 10))
		}},
		{"get_count", "GET /events", func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodGet, st.url+"/events")
		}},
		{"post_event", "POST /events", func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodPost, st.url+"/events")
		}},
		{"post_async", "POST /events/async", func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			return call(ctx, c, http.MethodPost, st.url+"/events/async")
		}},
	}
	for _, conns := range []int{16, 64} {
		client := httpClient(conns)
		for _, ep := range endpoints {
			rows, err := st.store.Events.Count(ctx)
			if err != nil {
				return err
			}
			res := load(ctx, client, conns, window, ep.req, nil)
			r.progress(group, "%2d connections %-19s %7.0f requests/s, p50 %6.2f ms, p99 %6.2f ms, %d failed",
				conns, ep.label, res.rps(), ms(percentile(res.latencies, 50)), ms(percentile(res.latencies, 99)), res.failed)
			r.check(group, fmt.Sprintf("%s at %d connections: every request answered 2xx", ep.label, conns),
				res.failed == 0 && res.ok > 0, fmt.Sprintf("statuses %v", res.statuses))
			name := fmt.Sprintf("api_%s_c%d", ep.name, conns)
			r.add(
				Row{Group: group, Name: name + "_rps", Value: res.rps(), Unit: "requests/s",
					Note: fmt.Sprintf("%s, %d rows in the table at the start", ep.label, rows)},
				Row{Group: group, Name: name + "_p50_ms", Value: ms(percentile(res.latencies, 50)), Unit: "ms"},
				Row{Group: group, Name: name + "_p99_ms", Value: ms(percentile(res.latencies, 99)), Unit: "ms"},
			)
		}
		client.CloseIdleConnections()
		// Let the queue path catch up, so that the next level's reads do not compete with it.
		if err := r.awaitProcessed(ctx, group, st.db, 5*time.Minute); err != nil {
			return err
		}
	}
	return r.verifySettled(ctx, group, st, idRange{first, preload})
}
