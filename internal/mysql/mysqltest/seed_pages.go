package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
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
