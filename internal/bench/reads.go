package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
)

// runReads measures what a long history costs the reads and the other statements of the events
// table: GET /events/{id} for random ids at 16 clients, through the API handler over
// HTTP, on a database holding 10,000,000 processed events beside one holding 10,000; and the mean
// time of each store operation the paths run, one at a time, at both sizes. The history is loaded
// in the database as the sweeper leaves it once it has folded and packed it: counted, and in page
// rows of event_pages (mysqltest.LoadPackedHistory encodes the pages as the pack does). The reads take
// turns in 1 s windows, in rotating order, for several rounds. Then the pack's own cost on a
// history that was never packed (what migration 0012 leaves on a deployed database): a folded
// history loaded in `events` and packed by the sweeper's PackPages until nothing is left.
func runReads(ctx context.Context, r *run) error {
	const group = "reads"
	small := int64(10_000)
	big := pick[int64](r, 10_000_000, 200_000)
	rounds := pick(r, 6, 2)
	window := pick(r, time.Second, 250*time.Millisecond)
	const clients = 16

	type db struct {
		*servedDB
		label string
		size  int64
		first int64
		res   loadResult
		// recent is an event the create op made: in `events`, not packed.
		recent int64
	}
	open := func(label string, n int64) (*db, error) {
		d := &db{label: label, size: n}
		var err error
		d.servedDB, err = r.serveScratch(ctx, label, func(pool *sql.DB) error {
			t0 := time.Now()
			said := t0
			first, err := mysqltest.LoadPackedHistory(ctx, pool, n, func(done int64) {
				if time.Since(said) > 10*time.Second || done == n {
					said = time.Now()
					r.progress(group, "%s: loaded %d of %d processed events (%.0f s)", label, done, n, time.Since(t0).Seconds())
				}
			})
			if err != nil {
				return err
			}
			d.first = first
			r.add(Row{Group: group, Name: fmt.Sprintf("reads_load_%d_s", n), Value: time.Since(t0).Seconds(), Unit: "s",
				Note: fmt.Sprintf("%d processed events, counted and packed in pages", n)})
			return nil
		})
		return d, err
	}
	smallDB, err := open("reads_small", small)
	if err != nil {
		return err
	}
	defer smallDB.stop()
	bigDB, err := open("reads_big", big)
	if err != nil {
		return err
	}
	defer bigDB.stop()
	dbs := []*db{smallDB, bigDB}

	// GET /events/{id} of a random loaded id: 200 with that id, or the request failed.
	get := func(d *db) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			id := d.first + rand.Int64N(d.size)
			status, body, err := call(ctx, c, http.MethodGet, d.url+"/events/"+strconv.FormatInt(id, 10))
			if err == nil && status == http.StatusOK {
				var e struct {
					ID int64 `json:"id"`
				}
				if json.Unmarshal(body, &e) != nil || e.ID != id {
					return 0, body, fmt.Errorf("GET /events/%d answered another event: %.100s", id, body)
				}
			}
			return status, body, err
		}
	}
	client := httpClient(clients)
	for round := range rounds {
		for i := range dbs {
			d := dbs[(round+i)%len(dbs)]
			w := load(ctx, client, clients, window, get(d), nil)
			d.res.ok += w.ok
			d.res.failed += w.failed
			d.res.took += w.took
		}
	}
	client.CloseIdleConnections()
	rows := map[string]Row{}
	for _, d := range dbs {
		r.progress(group, "%d clients GET /events/{id} with %d events: %.0f requests/s, %d failed", clients, d.size, d.res.rps(), d.res.failed)
		r.check(group, fmt.Sprintf("GET /events/{id} with %d events: every read answered 200 with its event", d.size),
			d.res.failed == 0 && d.res.ok > 0, fmt.Sprintf("%d ok, %d failed", d.res.ok, d.res.failed))
		row := Row{Group: group, Name: fmt.Sprintf("reads_get_%d_c16_rps", d.size), Value: d.res.rps(), Unit: "requests/s",
			Note: fmt.Sprintf("GET /events/{id}, random ids, %d processed events", d.size)}
		rows[d.label] = row
		r.add(row)
	}
	r.add(ratio(group, "reads_get_big_vs_small_c16", rows["reads_big"], rows["reads_small"], atLeast(0.8),
		fmt.Sprintf("GET /events/{id} with %d events against %d, 16 clients", big, small)))

	// The store's operations, one at a time, at both sizes.
	ops := []struct {
		name, note string
		n          int
		run        func(ctx context.Context, d *db) error
	}{
		{"get", "GET /events/{id}: Store.Get of a random id", pick(r, 20, 5), func(ctx context.Context, d *db) error {
			_, err := d.store.Events.Get(ctx, d.first+rand.Int64N(d.size))
			return err
		}},
		{"count", "GET /events: Store.Count (settled_count plus the unfolded events)", pick(r, 20, 5), func(ctx context.Context, d *db) error {
			_, err := d.store.Events.Count(ctx)
			return err
		}},
		// The operators' console's reads: pruned to the partitions of their states, so
		// the processed history should not show in their cost.
		{"list_failed", "GET /events?state=failed: Store.ListEvents of the failed set (fresh and failed partitions), a page of 50", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, _, err := d.store.Events.ListEvents(ctx, "failed", "", 0, 51)
				return err
			}},
		{"list_pending", "GET /events?state=pending: Store.ListEvents of the pending set (open partition), a page of 50", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, _, err := d.store.Events.ListEvents(ctx, "pending", "", 0, 51)
				return err
			}},
		{"overview", "GET /overview: Store.Overview (settled_count, every partition but the processed history, the waiting metrics)", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, err := d.store.Events.Overview(ctx)
				return err
			}},
		{"outcomes", "the processor's check of 10 redelivered ids: Store.Outcomes", pick(r, 20, 5), func(ctx context.Context, d *db) error {
			ids := make([]int64, 10)
			for i := range ids {
				ids[i] = d.first + rand.Int64N(d.size)
			}
			_, err := d.store.Events.Outcomes(ctx, ids)
			return err
		}},
		{"create", "POST /events: Store.CreateProcessed", pick(r, 50, 10), func(ctx context.Context, d *db) error {
			e, err := d.store.Events.CreateProcessed(ctx, "v")
			d.recent = e.ID
			return err
		}},
		{"get_recent", "GET /events/{id} of an event not packed yet (in `events`): Store.Get", pick(r, 20, 5), func(ctx context.Context, d *db) error {
			_, err := d.store.Events.Get(ctx, d.recent)
			return err
		}},
		{"create_pending", "POST /events/async: Store.CreatePending", pick(r, 50, 10), func(ctx context.Context, d *db) error {
			_, err := d.store.Events.CreatePending(ctx)
			return err
		}},
		{"sweep", "the sweeper's claim and settlement of what is due (the pending events just created, then none)", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, err := (&processing.Engine{Store: d.store.Events, TaskStore: d.store.Tasks, By: exactlyonce.BySweeper}).ProcessDue(ctx, 0, 50)
				return err
			}},
		{"fold", "the sweeper's fold of what was settled into the count: Store.FoldSettled", pick(r, 5, 2),
			func(ctx context.Context, d *db) error {
				_, err := d.store.Events.FoldSettled(ctx, eventstore.DefaultFoldBatch)
				return err
			}},
		{"pack", "the sweeper's pack of folded events into pages (what can be packed: the pages behind the counter's): Store.PackPages", pick(r, 5, 2),
			func(ctx context.Context, d *db) error {
				_, _, err := d.store.Pages.PackPages(ctx, 1000, time.Hour)
				return err
			}},
		{"list_processed", "GET /events?state=processed: Store.ListEvents of the processed events, unpacked then packed, a page of 50", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, _, err := d.store.Events.ListEvents(ctx, "processed", "", d.first+rand.Int64N(d.size), 51)
				return err
			}},
		{"attempts", "GET /events/{id}/attempts of a packed event (none in task_attempts, then its page): Store.Attempts", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, err := d.store.Tasks.Attempts(ctx, d.first+rand.Int64N(d.size))
				return err
			}},
		// A reference's listing reads its directory, then its own tasks: none here.
		{"reference_tasks", "GET /references/{id}/events of a reference with no task: Store.ReferenceTasks (its directory's cell)", pick(r, 20, 5),
			func(ctx context.Context, d *db) error {
				_, err := d.store.Tasks.ReferenceTasks(ctx, "no-such-reference", 0, 50)
				return err
			}},
	}
	for _, op := range ops {
		byLabel := map[string]Row{}
		for _, d := range dbs {
			t0 := time.Now()
			for range op.n {
				if err := op.run(ctx, d); err != nil {
					return fmt.Errorf("%s with %d events: %w", op.name, d.size, err)
				}
			}
			mean := time.Since(t0) / time.Duration(op.n)
			row := Row{Group: group, Name: fmt.Sprintf("reads_op_%s_%d_ms", op.name, d.size), Value: float64(mean.Microseconds()) / 1000,
				Unit: "ms", Note: fmt.Sprintf("%s, mean of %d, %d events", op.note, op.n, d.size)}
			byLabel[d.label] = row
			r.add(row)
		}
		r.progress(group, "%-15s %8.2f ms with %d events, %8.2f ms with %d", op.name, byLabel["reads_small"].Value, small, byLabel["reads_big"].Value, big)
	}
	if err := referenceReads(ctx, r, group, sizedStore{smallDB.store, small}, sizedStore{bigDB.store, big}); err != nil {
		return err
	}
	smallDB.stop()
	bigDB.stop()
	return packBacklog(ctx, r, group, pick[int64](r, 1_000_000, 50_000))
}

// packBacklog measures how long the sweeper's pack takes to pack a history of n folded events that
// was never packed: what a deployed database holds after migration 0012, packed in the background
// while everything runs (no table is copied, nothing waits for it).
func packBacklog(ctx context.Context, r *run, group string, n int64) error {
	store, pool, done, err := r.scratchStore(ctx, "reads_backlog", 4)
	if err != nil {
		return err
	}
	defer done()
	first, err := mysqltest.LoadFoldedHistory(ctx, pool, n, nil)
	if err != nil {
		return err
	}
	t0 := time.Now()
	var packed int64
	for {
		pages, events, err := store.Pages.PackPages(ctx, 1000, time.Hour)
		if err != nil {
			return err
		}
		packed += events
		r.progress(group, "packing a history of %d events never packed: %d packed (%.0f s)", n, packed, time.Since(t0).Seconds())
		if pages == 0 {
			break
		}
	}
	took := time.Since(t0)
	count, err := store.Events.Count(ctx)
	if err != nil {
		return err
	}
	_, getErr := store.Events.Get(ctx, first+rand.Int64N(n))
	r.check(group, fmt.Sprintf("a history of %d events packed: the count unchanged, an event read from its page", n),
		count == n && getErr == nil && packed >= n-2*1000, fmt.Sprintf("count %d, packed %d, get: %v", count, packed, getErr))
	r.add(Row{Group: group, Name: fmt.Sprintf("reads_pack_backlog_%d_s", n), Value: took.Seconds(), Unit: "s",
		Note: fmt.Sprintf("Store.PackPages until nothing is left, on %d folded events never packed (the last two pages wait for the counter): %.0f events/s", n, float64(packed)/took.Seconds())})
	return nil
}
