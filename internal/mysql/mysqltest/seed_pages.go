package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// LoadPackedHistory inserts n processed events as the sweeper leaves them once it has folded and
// packed them (counted in settled_count, in event_pages, pagestore/pages.sql): a long history, for
// measuring what reads cost with it. The pages are encoded here, as the pack encodes them, and
// inserted a batch of pages a transaction with their addition to the count, so the count stays
// exact. It returns the first id; the ids are first..first+n-1, taken from the status counter. For
// the benchmark's scratch databases.
func LoadPackedHistory(ctx context.Context, db *sql.DB, n int64, onChunk func(done int64)) (int64, error) {
	first, err := reserveIDs(ctx, db, n)
	if err != nil {
		return 0, err
	}
	const pagesPerTx = 5
	now := time.Now().UTC().Truncate(time.Microsecond)
	by := "sweeper"
	row := "(" + mysql.Placeholders(2+pages.Columns) + ")"
	core, err := mysql.New(db, mysql.Config{})
	if err != nil {
		return 0, err
	}
	for lo := first; lo < first+n; {
		var args []any
		var rows, events int64
		for rows < pagesPerTx && lo < first+n {
			page := pages.PageOf(lo)
			hi := min((page+1)*pages.Size, first+n) // exclusive
			cols := make([][]byte, pages.Columns)
			for c := range cols {
				cols[c] = pages.Empty()
			}
			for u := pages.UnitOf(lo); u <= pages.UnitOf(hi-1); u++ {
				batch := make([]pages.Row, 0, pages.Unit)
				for id := max(lo, u*pages.Unit); id < min(hi, (u+1)*pages.Unit); id++ {
					v := fmt.Sprintf("history-%d", id-first+1)
					batch = append(batch, pages.Row{ID: id, Kind: "plain", State: 30, Value: &v, CreatedAt: now,
						ProcessedAt: &now, ProcessedBy: &by, ProcessCount: 1})
				}
				_, unitCols, err := pages.Encode(batch)
				if err != nil {
					return 0, err
				}
				copy(cols[pages.FirstColumn(u):], unitCols[:])
			}
			args = append(args, page, hi-lo)
			for _, c := range cols {
				args = append(args, c)
			}
			rows++
			events += hi - lo
			lo = hi
		}
		q := strings.Replace(strings.Replace(queries.LoadPages, "/*columns*/", allColumns, 1), "/*rows*/",
			strings.TrimSuffix(strings.Repeat(row+", ", int(rows)), ", "), 1)
		err := core.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
			_, err := eventstore.AddSettled(ctx, tx, events)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("load packed history: %w", err)
		}
		if onChunk != nil {
			onChunk(lo - first)
		}
	}
	return first, nil
}

// LoadArchivedHistory writes n processed events straight to the archive a as page objects (as the
// move leaves them: internal/pages' object format), counted in settled_count and history_archive,
// with ids from the counter (the ids up to the end of the last page are taken too, left unused, so
// that the next ids start a page). workers objects are encoded and written at once. It returns the
// first id. onChunk, if not nil, is told the events written so far every 100 pages, from one
// goroutine at a time. For the benchmark's scratch databases: a long archived history behind a window.
func LoadArchivedHistory(ctx context.Context, db *sql.DB, a pagestore.Archive, n int64, workers int, onChunk func(done int64)) (int64, error) {
	first, err := reserveIDs(ctx, db, n)
	if err != nil {
		return 0, err
	}
	end := (pages.PageOf(first+n-1) + 1) * pages.Size // exclusive: the next page's first id
	if pad := end - (first + n); pad > 0 {
		if _, err := reserveIDs(ctx, db, pad); err != nil {
			return 0, err
		}
	}
	now := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Microsecond)
	firstPage, lastPage := pages.PageOf(first), pages.PageOf(first+n-1)
	next := make(chan int64)
	errs := make(chan error, workers)
	var done atomic.Int64
	var chunkMu sync.Mutex // onChunk is called by one worker at a time
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for page := range next {
				lo, hi := max(first, page*pages.Size), min(first+n, (page+1)*pages.Size)
				obj, err := archivedObject(first, lo, hi, now)
				if err != nil {
					errs <- err
					return
				}
				if err := a.PutObject(ctx, page, archive.Object{Bytes: obj}, ""); err != nil {
					errs <- err
					return
				}
				d := done.Add(hi - lo)
				if onChunk != nil && page%100 == 0 {
					chunkMu.Lock()
					onChunk(d)
					chunkMu.Unlock()
				}
			}
		}()
	}
feed:
	for page := firstPage; page <= lastPage; page++ {
		select {
		case next <- page:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	if err != nil {
		return 0, fmt.Errorf("load archived history: %w", err)
	}
	core, err := mysql.New(db, mysql.Config{})
	if err != nil {
		return 0, err
	}
	err = core.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, queries.LoadArchive, lastPage-firstPage+1, n, lastPage+1, lastPage+1, firstPage, lastPage+1); err != nil {
			return err
		}
		_, err := eventstore.AddSettled(ctx, tx, n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("load archived history: %w", err)
	}
	if onChunk != nil {
		onChunk(n)
	}
	return first, nil
}

// archivedObject encodes the page object of the archived events lo..hi-1 (one page's), their
// values numbered from first.
func archivedObject(first, lo, hi int64, now time.Time) ([]byte, error) {
	by := "sweeper"
	page := pages.PageOf(lo)
	var cols [pages.Columns][]byte
	// One batch and one string of values a unit, reused: the loader encodes 100,000 pages for
	// 1,000,000,000 events, and its allocations were most of its time.
	batch := make([]pages.Row, 0, pages.Unit)
	values := make([]string, pages.Unit)
	var buf []byte
	var ends [pages.Unit]int
	for u := pages.UnitOf(lo); u <= pages.UnitOf(hi-1); u++ {
		from, to := max(lo, u*pages.Unit), min(hi, (u+1)*pages.Unit)
		buf = buf[:0]
		for id := from; id < to; id++ {
			buf = strconv.AppendInt(append(buf, "archived-"...), id-first+1, 10)
			ends[id-from] = len(buf)
		}
		all := string(buf)
		batch = batch[:0]
		start := 0
		for id := from; id < to; id++ {
			i := id - from
			values[i] = all[start:ends[i]]
			start = ends[i]
			batch = append(batch, pages.Row{ID: id, Kind: "plain", State: 30, Value: &values[i], CreatedAt: now,
				ProcessedAt: &now, ProcessedBy: &by, ProcessCount: 1})
		}
		_, unitCols, err := pages.Encode(batch)
		if err != nil {
			return nil, err
		}
		copy(cols[pages.FirstColumn(u):], unitCols[:])
	}
	return pages.EncodeObject(page, &cols), nil
}

// ArchivedObjectBytes is an upper bound of the bytes of the page objects LoadArchivedHistory
// writes for n events (the objects' own bytes, not the store's files around them): the number of
// pages it can span times the size of a full page of its longest values.
func ArchivedObjectBytes(n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	// A full page whose values are numbered up to n (or up to a page, when n is shorter): the
	// longest values LoadArchivedHistory writes; ids from a page's start, as any page's are.
	last := max(n, pages.Size)
	page := int64(1_000_000)
	lo := page * pages.Size
	obj, err := archivedObject(lo-(last-pages.Size), lo, lo+pages.Size, time.Now().UTC().Truncate(time.Microsecond))
	if err != nil {
		return 0, err
	}
	return int64(len(obj)) * ((n+pages.Size-1)/pages.Size + 1), nil
}
