package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// runArchive measures the archive, in the reads group, against a local S3 endpoint
// (tools/s3local, gofakes3, its objects in files) reached through the AWS SDK's S3 client:
//
//   - GET /events/{id} of events inside the window (10,000 events in page rows) with a long
//     archived history behind it (written straight to the bucket as page objects), against the
//     same window with nothing behind it: the database holds the window only, so the ratio should
//     be about 1.
//   - GET /events/{id} of archived events, with no cache (one GET of the page each), p50 and p99,
//     beside the endpoint's own GET of one page object, the two taking turns one request at a time.
//   - The database (event_pages' rows and size) while the history grows 10x and the sweeper's move
//     keeps a window of 0: it stays what the window holds.
func runArchive(ctx context.Context, r *run, group string) error {
	window := int64(10_000)
	// The archived history behind the window: Config.Archived (BENCH_ARCHIVED), by default 20,000,000
	// events (2,000 objects of about 600 KB, 1.2 GB). The issue asks for 1,000,000,000: 100,000
	// objects, about 60 GB, which a run makes when asked to. The database's side does not depend on
	// how many there are (it holds the window and history_archive's one row), and an archived read
	// is one GET whatever the count.
	archived := pick[int64](r, 20_000_000, 200_000)
	if r.cfg.Archived > 0 {
		archived = r.cfg.Archived
	}
	rounds := pick(r, 6, 2)
	win := pick(r, time.Second, 250*time.Millisecond)
	const clients = 16

	dir, err := os.MkdirTemp("", "bench-s3local-")
	if err != nil {
		return err
	}
	// Removed however the group ends: an error, or ctx cancelled by SIGINT or SIGTERM (cmd/bench),
	// returns here through the load, whose writes fail with the context.
	defer os.RemoveAll(dir)
	need, free, err := archiveDiskNeed(dir, archived)
	if err != nil {
		return err
	}
	if need > free {
		return fmt.Errorf("%d archived events need about %.1f GB (%d bytes: the page objects, their metadata files and a margin) in %s, which has %.1f GB (%d bytes) free: "+
			"set BENCH_ARCHIVED lower or TMPDIR to a larger disk", archived, float64(need)/1e9, need, dir, float64(free)/1e9, free)
	}
	r.progress(group, "%d archived events: about %.1f GB in %s (%.1f GB free)", archived, float64(need)/1e9, dir, float64(free)/1e9)
	// One bucket for the archived history behind the window, another for the move's run (each
	// archive's pages are its database's).
	const bucket, movedBucket = "bench-history", "bench-moved"
	s3srv, err := locals3.Start("", dir, bucket, movedBucket)
	if err != nil {
		return err
	}
	defer s3srv.Stop()
	client := locals3.NewClient(s3srv.URL)

	type db struct {
		*servedDB
		label        string
		size         int64 // events behind the window, archived
		first        int64 // the window's first id
		archiveFirst int64
		res          loadResult
	}
	open := func(label string, behind int64) (*db, error) {
		d := &db{label: label, size: behind}
		a := archive.New(client, bucket, 0)
		var err error
		d.servedDB, err = r.serveScratch(ctx, label, func(pool *sql.DB) error {
			if behind > 0 {
				t0 := time.Now()
				said := t0
				if d.archiveFirst, err = mysqltest.LoadArchivedHistory(ctx, pool, a, behind, 4, func(done int64) {
					if time.Since(said) > 10*time.Second || done == behind {
						said = time.Now()
						r.progress(group, "%s: wrote %d of %d archived events as page objects (%.0f s)", label, done, behind, time.Since(t0).Seconds())
					}
				}); err != nil {
					return err
				}
				r.add(Row{Group: group, Name: fmt.Sprintf("reads_archive_load_%d_s", behind), Value: time.Since(t0).Seconds(), Unit: "s",
					Note: fmt.Sprintf("%d processed events written to the local S3 as %d page objects", behind, behind/10_000)})
				used, files, err := diskUsage(dir)
				if err != nil {
					return err
				}
				r.add(Row{Group: group, Name: fmt.Sprintf("reads_archive_disk_%d_gb", behind), Value: float64(used) / 1e9, Unit: "GB",
					Note: fmt.Sprintf("the local S3's files (objects and their metadata) for %d archived events: %d files, the blocks they take", behind, files)})
			}
			d.first, err = mysqltest.LoadPackedHistory(ctx, pool, window, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		d.store.WithArchive(a)
		return d, nil
	}
	small, err := open("archive_small", 0)
	if err != nil {
		return err
	}
	defer small.stop()
	big, err := open("archive_big", archived)
	if err != nil {
		return err
	}
	defer big.stop()
	dbs := []*db{small, big}

	get := func(d *db) request {
		return func(ctx context.Context, c *http.Client, _ int) (int, []byte, error) {
			id := d.first + rand.Int64N(window)
			return call(ctx, c, http.MethodGet, d.url+"/events/"+strconv.FormatInt(id, 10))
		}
	}
	hc := httpClient(clients)
	for round := range rounds {
		for i := range dbs {
			d := dbs[(round+i)%len(dbs)]
			w := load(ctx, hc, clients, win, get(d), nil)
			d.res.ok += w.ok
			d.res.failed += w.failed
			d.res.took += w.took
		}
	}
	hc.CloseIdleConnections()
	rows := map[string]Row{}
	for _, d := range dbs {
		r.check(group, fmt.Sprintf("GET /events/{id} in the window, %d archived behind: every read answered", d.size),
			d.res.failed == 0 && d.res.ok > 0, fmt.Sprintf("%d ok, %d failed", d.res.ok, d.res.failed))
		row := Row{Group: group, Name: fmt.Sprintf("reads_window_get_%d_archived_c16_rps", d.size), Value: d.res.rps(), Unit: "requests/s",
			Note: fmt.Sprintf("GET /events/{id} of the %d events in the window (page rows), %d archived behind them", window, d.size)}
		rows[d.label] = row
		r.add(row)
	}
	r.add(ratio(group, "reads_window_get_archived_vs_none_c16", rows["archive_big"], rows["archive_small"], atLeast(0.8),
		fmt.Sprintf("GET /events/{id} inside the window with %d archived events behind it against none, 16 clients", archived)))

	if err := archivedLatency(ctx, r, group, big.store, client, bucket, big.archiveFirst, archived, big.first, window); err != nil {
		return err
	}
	small.stop()
	big.stop()
	return boundedByWindow(ctx, r, group, client, movedBucket)
}

// archivedLatency measures GET /events/{id} of archived events through the API handler, with no
// page cache (one GET of the page a read), beside the endpoint's own GetObject of a page, taking
// turns one request at a time.
func archivedLatency(ctx context.Context, r *run, group string, st *wire.Stores, client *s3.Client, bucket string, first, n, windowFirst, window int64) error {
	reader := wire.NewStores(st.DB).WithArchive(archive.New(client, bucket, -1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := httpserver.New(&api.Server{Stores: reader.API()})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String()
	hc := httpClient(1)
	defer hc.CloseIdleConnections()
	samples := pick(r, 2000, 100)
	var reads, gets, inWindow []time.Duration
	var failed int
	for range samples {
		t0 := time.Now()
		status, _, err := call(ctx, hc, http.MethodGet, url+"/events/"+strconv.FormatInt(windowFirst+rand.Int64N(window), 10))
		if err != nil || status != http.StatusOK {
			failed++
			continue
		}
		inWindow = append(inWindow, time.Since(t0))

		id := first + rand.Int64N(n)
		t0 = time.Now()
		status, _, err = call(ctx, hc, http.MethodGet, url+"/events/"+strconv.FormatInt(id, 10))
		if err != nil || status != http.StatusOK {
			failed++
			continue
		}
		reads = append(reads, time.Since(t0))

		page := (first + rand.Int64N(n)) / 10_000
		t0 = time.Now()
		out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(archive.Key(page))})
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, out.Body)
		out.Body.Close()
		if err != nil {
			return err
		}
		gets = append(gets, time.Since(t0))
	}
	r.check(group, "GET /events/{id} of archived events, no cache: every read answered 200", failed == 0, fmt.Sprintf("%d failed of %d", failed, samples))
	slices.Sort(reads)
	slices.Sort(gets)
	slices.Sort(inWindow)
	for _, p := range []float64{50, 99} {
		read := Row{Group: group, Name: fmt.Sprintf("reads_archived_get_p%.0f_ms", p), Value: ms(percentile(reads, p)), Unit: "ms",
			Note: fmt.Sprintf("GET /events/{id} of a random archived event over HTTP, no page cache (one S3 GET of its page), p%.0f of %d", p, len(reads))}
		raw := Row{Group: group, Name: fmt.Sprintf("reads_s3_getobject_p%.0f_ms", p), Value: ms(percentile(gets, p)), Unit: "ms",
			Note: fmt.Sprintf("the local S3 endpoint's own GetObject of one page object (SDK client), p%.0f of %d, taking turns with the reads", p, len(gets))}
		db := Row{Group: group, Name: fmt.Sprintf("reads_window_get_p%.0f_ms", p), Value: ms(percentile(inWindow, p)), Unit: "ms",
			Note: fmt.Sprintf("GET /events/{id} of a random event of the window (its page row) over HTTP, p%.0f of %d, taking turns with the others: the database's part of an archived read", p, len(inWindow))}
		r.add(db, read, raw, ratio(group, fmt.Sprintf("reads_archived_get_vs_getobject_p%.0f", p), read, raw, nil,
			"an archived read against the GET it makes: what the API, the database's miss and the decoding add"))
	}
	r.progress(group, "archived GET /events/{id}: p50 %.2f ms, p99 %.2f ms; S3 GetObject: p50 %.2f ms, p99 %.2f ms; a window read: p50 %.2f ms, p99 %.2f ms",
		ms(percentile(reads, 50)), ms(percentile(reads, 99)), ms(percentile(gets, 50)), ms(percentile(gets, 99)),
		ms(percentile(inWindow, 50)), ms(percentile(inWindow, 99)))
	return nil
}

// boundedByWindow grows a packed history 10x while the sweeper's move (a window of 0) archives it,
// and reads the database's page rows and event_pages' size at 1x and 10x.
func boundedByWindow(ctx context.Context, r *run, group string, client *s3.Client, bucket string) error {
	store, pool, done, err := r.scratchStore(ctx, "archive_bounded", 4)
	if err != nil {
		return err
	}
	defer done()
	a := archive.New(client, bucket, 0)
	store.WithArchive(a)
	step := pick[int64](r, 200_000, 20_000)
	type at struct {
		history, pageRows, eventPagesBytes int64
		tiers                              exactlyonce.HistoryTiers
	}
	var seen []at
	var total int64
	// The history grows a step at a time, the move running after each as the sweeper's maintenance
	// does (loading 10x at once would have the table hold it all before the move, which no running
	// stack does); the database is read after the first step and after the tenth.
	for i := range 10 {
		grow := step
		if _, err := mysqltest.LoadPackedHistory(ctx, pool, grow, nil); err != nil {
			return err
		}
		total += grow
		t0 := time.Now()
		var moved int64
		for {
			res, err := store.Pages.ArchivePages(ctx, 0, time.Minute)
			if err != nil {
				return err
			}
			moved += res.Pages
			if res.Pages == 0 {
				break
			}
		}
		r.progress(group, "history of %d events: moved %d pages to the archive in %.1f s", total, moved, time.Since(t0).Seconds())
		if i != 0 && i != 9 {
			continue
		}
		tiers, err := store.Events.HistoryTiers(ctx)
		if err != nil {
			return err
		}
		pageRows, _, err := mysqltest.PageRowCounts(ctx, pool) // exact: the tiers' page rows are an estimate
		if err != nil {
			return err
		}
		var size int64
		if _, err := pool.ExecContext(ctx, "ANALYZE TABLE event_pages"); err != nil {
			return err
		}
		if err := pool.QueryRowContext(ctx, "SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.TABLES "+
			"WHERE table_schema = DATABASE() AND table_name = 'event_pages'").Scan(&size); err != nil {
			return err
		}
		seen = append(seen, at{history: total, pageRows: pageRows, eventPagesBytes: size, tiers: tiers})
		r.add(Row{Group: group, Name: fmt.Sprintf("reads_archive_page_rows_%d", total), Value: float64(pageRows), Unit: "rows",
			Note: fmt.Sprintf("event_pages' rows with %d events of history, the move keeping a window of 0 (the pages behind the counter's); %d events archived in %d objects",
				total, archived(tiers).Events, archived(tiers).Pages)})
		r.add(Row{Group: group, Name: fmt.Sprintf("reads_archive_event_pages_mb_%d", total), Value: float64(size) / (1 << 20), Unit: "MB",
			Note: fmt.Sprintf("event_pages' data and index (information_schema, after ANALYZE) with %d events of history", total)})
	}
	n, err := store.Events.Count(ctx)
	if err != nil {
		return err
	}
	first, last := seen[0], seen[len(seen)-1]
	r.check(group, "the history grew 10x: event_pages' rows stay what the window holds, the count is exact, every event once across the tiers",
		last.pageRows <= first.pageRows+1 && n == total && last.tiers.EventRows+last.tiers.PagedEvents+archived(last.tiers).Events == total &&
			last.tiers.Total == total,
		fmt.Sprintf("rows %d then %d; %.1f MB then %.1f MB; count %d of %d; tiers %+v", first.pageRows, last.pageRows,
			float64(first.eventPagesBytes)/(1<<20), float64(last.eventPagesBytes)/(1<<20), n, total, last.tiers))
	return nil
}

// archived is the archive's tier of t, zero when it has none.
func archived(t exactlyonce.HistoryTiers) exactlyonce.ArchiveTier {
	if t.Archive == nil {
		return exactlyonce.ArchiveTier{}
	}
	return *t.Archive
}

// archiveDiskNeed returns the bytes n archived events need in dir (the page objects, a file each
// for their metadata, and a margin of a tenth and 1 GB) and the bytes free there.
func archiveDiskNeed(dir string, n int64) (need, free int64, err error) {
	objects, err := mysqltest.ArchivedObjectBytes(n)
	if err != nil {
		return 0, 0, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("free disk in %s: %w", dir, err)
	}
	const metadata = 8 << 10 // a metadata file per object, and the last block of the object's own
	pageObjects := (n+pages.Size-1)/pages.Size + 1
	need = objects + pageObjects*metadata
	return need + need/10 + 1<<30, int64(st.Bavail) * int64(st.Bsize), nil
}

// diskUsage returns the bytes of the blocks the files under dir take, and how many files there are.
func diskUsage(dir string) (used, files int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		files++
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used += st.Blocks * 512
		} else {
			used += info.Size()
		}
		return nil
	})
	return used, files, err
}
