package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/console"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
)

// runConsole measures what the operators' console adds to the API's reads it shows: GET
// /ui/api/overview and GET /ui/api/agents through the console's server (Host check, allow-list,
// the in-process upstream, the security headers), as `make run` mounts it, beside GET /overview and
// GET /agents on the API itself, on one scratch database holding some events, at 16 clients, in
// alternating windows. The pages poll these every one to two seconds, so what matters is that the
// console is not the slow part; the reads' own cost against history is the reads group's.
func runConsole(ctx context.Context, r *run) error {
	const group = "console"
	const clients = 16
	rounds := pick(r, 6, 2)
	window := pick(r, time.Second, 250*time.Millisecond)
	db, err := r.serveScratch(ctx, "console", nil)
	if err != nil {
		return err
	}
	defer db.stop()
	for range 200 {
		if _, err := db.store.Events.CreateProcessed(ctx, "console"); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	handler, err := console.New(console.Options{API: &api.Server{Stores: db.store.API()}, Addr: ln.Addr().String(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		ln.Close()
		return err
	}
	srv := httpserver.New(handler)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	ui := "http://" + ln.Addr().String() + "/ui/api"

	get := func(url string) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return 0, nil, err
			}
			return do(c, req)
		}
	}
	for _, path := range []string{"/overview", "/agents"} {
		cs := []*side{
			{name: "direct", label: "the API", req: get(db.url + path)},
			{name: "console", label: "through the console", req: get(ui + path)},
		}
		client := httpClient(clients)
		alternate(ctx, client, clients, rounds, window, cs)
		client.CloseIdleConnections()
		key := path[1:]
		rows := map[string]Row{}
		for _, c := range cs {
			r.progress(group, "GET %-10s %-20s %7.0f requests/s, %d failed", path, c.label, c.res.rps(), c.res.failed)
			r.check(group, fmt.Sprintf("GET %s %s: every request answered 2xx", path, c.label),
				c.res.failed == 0 && c.res.ok > 0, fmt.Sprintf("%d ok, %d failed", c.res.ok, c.res.failed))
			row := Row{Group: group, Name: fmt.Sprintf("console_%s_%s_rps", key, c.name), Value: c.res.rps(), Unit: "requests/s",
				Note: fmt.Sprintf("GET %s, %s, %d clients", path, c.label, clients)}
			rows[c.name] = row
			r.add(row)
		}
		r.add(ratio(group, fmt.Sprintf("console_%s_ratio", key), rows["console"], rows["direct"], atLeast(0.8),
			fmt.Sprintf("GET %s through the console's server (checks, allow-list, in-process upstream) vs the API alone", path)))
	}
	return nil
}
