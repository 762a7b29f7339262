package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
)

// runIdem measures POST /events with an Idempotency-Key through the API handler over HTTP, as one
// process serving many requests runs it (keyed creates grouped): a fresh key on every request
// beside the same requests without a key, at 16 and 64 clients; the same fresh-key requests on a
// database holding 1,000,000 unexpired keys beside one holding none (the lookup's cost must not
// grow with the keys stored); and the replays per second of one stored key. The contenders take
// turns in 1 s windows, in rotating order, for several rounds, and each rate is the total over its
// windows.
func runIdem(ctx context.Context, r *run) error {
	const group = "idem"
	stored := pick[int64](r, 1_000_000, 10_000)
	rounds := pick(r, 8, 2)
	window := pick(r, time.Second, 250*time.Millisecond)

	open := func(label string, keys int64) (*servedDB, error) {
		if keys == 0 {
			return r.serveScratch(ctx, label, nil)
		}
		return r.serveScratch(ctx, label, func(pool *sql.DB) error {
			t0 := time.Now()
			if err := mysqltest.LoadKeys(ctx, pool, keys, time.Hour, func(done int64) {
				r.progress(group, "loading keys: %d of %d", done, keys)
			}); err != nil {
				return err
			}
			r.add(Row{Group: group, Name: "idem_load_keys_s", Value: time.Since(t0).Seconds(), Unit: "s",
				Note: fmt.Sprintf("%d unexpired keys and their directories, by INSERT ... SELECT", keys)})
			return nil
		})
	}
	empty, err := open("idem_empty", 0)
	if err != nil {
		return err
	}
	defer empty.stop()
	full, err := open("idem_keys", stored)
	if err != nil {
		return err
	}
	defer full.stop()

	var seq atomic.Int64
	var unkeyed int64 // creates without a key answered on the empty database
	post := func(url string, keyed bool) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/events", nil)
			if err != nil {
				return 0, nil, err
			}
			if keyed {
				req.Header.Set(api.KeyHeader, fmt.Sprintf("bench-%d", seq.Add(1)))
			}
			return do(c, req)
		}
	}
	for _, clients := range []int{16, 64} {
		cs := []*side{
			{name: "nokey", label: "no key", req: post(empty.url, false)},
			{name: "fresh", label: "fresh key, no keys stored", req: post(empty.url, true)},
			{name: "fresh_stored", label: fmt.Sprintf("fresh key, %d keys stored", stored), req: post(full.url, true)},
		}
		client := httpClient(clients)
		alternate(ctx, client, clients, rounds, window, cs)
		client.CloseIdleConnections()
		unkeyed += cs[0].res.ok
		rows := map[string]Row{}
		for _, c := range cs {
			r.progress(group, "%2d clients %-36s %7.0f requests/s, %d failed", clients, c.label, c.res.rps(), c.res.failed)
			r.check(group, fmt.Sprintf("%s at %d clients: every request answered 2xx", c.label, clients),
				c.res.failed == 0 && c.res.ok > 0, fmt.Sprintf("%d ok, %d failed", c.res.ok, c.res.failed))
			row := Row{Group: group, Name: fmt.Sprintf("idem_%s_c%d_rps", c.name, clients), Value: c.res.rps(), Unit: "requests/s",
				Note: "POST /events, " + c.label}
			rows[c.name] = row
			r.add(row)
		}
		r.add(
			ratio(group, fmt.Sprintf("idem_fresh_vs_nokey_c%d", clients), rows["fresh"], rows["nokey"], atLeast(0.8),
				"POST /events with a fresh Idempotency-Key on every request, against the same without a key"),
			ratio(group, fmt.Sprintf("idem_stored_vs_none_c%d", clients), rows["fresh_stored"], rows["fresh"], atLeast(0.8),
				fmt.Sprintf("fresh keys with %d unexpired keys stored, against none stored", stored)),
		)
	}

	// Replays of one stored key.
	var want []byte
	replay := func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, empty.url+"/events", nil)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set(api.KeyHeader, "replayed")
		status, body, err := do(c, req)
		if err == nil && status == http.StatusCreated && string(body) != string(want) {
			return 0, nil, errors.New("a replay that is not the stored answer")
		}
		return status, body, err
	}
	client := httpClient(16)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, empty.url+"/events", nil)
	req.Header.Set(api.KeyHeader, "replayed")
	status, body, err := do(client, req)
	if err != nil || status != http.StatusCreated {
		return fmt.Errorf("the key to replay: %d %s %v", status, body, err)
	}
	want = body
	var res loadResult
	for range rounds {
		w := load(ctx, client, 16, window, replay, nil)
		res.ok += w.ok
		res.failed += w.failed
		res.took += w.took
	}
	client.CloseIdleConnections()
	r.progress(group, "16 clients replays of one key %7.0f requests/s, %d failed", res.rps(), res.failed)
	r.check(group, "every replay is the stored answer", res.failed == 0 && res.ok > 0, fmt.Sprintf("%d ok, %d failed", res.ok, res.failed))
	r.add(Row{Group: group, Name: "idem_replay_c16_rps", Value: res.rps(), Unit: "requests/s",
		Note: "POST /events repeating one stored key, 16 clients: every answer the stored one"})
	n, err := empty.store.Events.Count(ctx)
	if err != nil {
		return err
	}
	var keys int64
	if err := empty.store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_keys").Scan(&keys); err != nil {
		return err
	}
	r.check(group, "one event per key, plus one per create without a key", n == keys+unkeyed,
		fmt.Sprintf("%d events, %d keys, %d creates without a key", n, keys, unkeyed))
	return nil
}

// do sends req and reads the whole body, so that the connection is reused.
func do(c *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
