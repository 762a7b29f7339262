package pagestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// What a page row takes in InnoDB, measured: docs/deploy.md's cost of history in Aurora
// ("History: Aurora against S3") is computed from it, beside what the page takes packed
// (internal/pages/size_test.go). Whole pages of plain events (sync creates) and of tasks are
// inserted into a table shaped as event_pages but not partitioned (1,024 partitions' own first
// extents would hide what a row takes), and the growth of its clustered index, BLOB pages
// included, is divided by the events. InnoDB keeps each BLOB column that does not fit in the row on 16 KiB pages of its own,
// never shared: a plain event's column of 6 KB takes a whole page, so a plain event takes about
// three times its packed size. The bounds are docs/deploy.md's figures.
func TestPageRowBytesInInnoDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 2)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	r := rand.New(rand.NewPCG(19, 31))
	ptr := func(s string) *string { return &s }
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	payload := []byte(strings.Repeat(`{"order":"ord_0000000000"}`, 8)[:200])
	for _, m := range []struct {
		name     string
		rows     int
		row      func(id int64) pages.Row
		min, max float64
	}{
		{"sync", 30, func(id int64) pages.Row {
			at := base.Add(time.Duration(id) * time.Millisecond)
			return pages.Row{ID: id, RoutingHash: r.Uint32(), Kind: string(exactlyonce.KindPlain), State: 30,
				Value: ptr(exactlyonce.NewValue()), CreatedAt: at, ProcessedAt: &at, ProcessedBy: ptr("api"), ProcessCount: 1}
		}, 155, 180},
		{"async", 30, func(id int64) pages.Row {
			at := base.Add(time.Duration(id) * time.Millisecond)
			done := at.Add(time.Duration(5+r.IntN(400)) * time.Millisecond)
			return pages.Row{ID: id, RoutingHash: r.Uint32(), Kind: string(exactlyonce.KindPlain), State: 30, Value: ptr(exactlyonce.NewValue()),
				CreatedAt: at, ProcessedAt: &done, ProcessedBy: ptr("processor"), ProcessCount: 1, ClaimID: ptr(exactlyonce.NewClaimID())}
		}, 155, 180},
		{"task", 10, func(id int64) pages.Row {
			at := base.Add(time.Duration(id) * time.Millisecond)
			claim, n := exactlyonce.NewClaimID(), int64(5)
			return pages.Row{ID: id, RoutingHash: r.Uint32(), Kind: string(exactlyonce.KindTask), State: 30, CreatedAt: at, ProcessedAt: &at,
				ProcessedBy: ptr("processor"), ProcessCount: 1, Attempts: 1, URL: ptr("https://hooks.example.com/orders/events"), Payload: payload,
				ReferenceID: ptr(fmt.Sprint("order-", r.IntN(1_000_000))), MaxRetries: &n, Position: &id, ClaimID: &claim,
				WorkerID:     ptr(exactlyonce.NewClaimID()),
				TaskAttempts: []pages.Attempt{{Number: 1, StartedAt: at, DurationUS: 14_000, Status: 200, ClaimID: claim}}}
		}, 480, 520},
	} {
		table := "page_bytes_" + m.name
		var cols []string
		for c := range pages.Columns {
			cols = append(cols, fmt.Sprintf("c%d MEDIUMBLOB NOT NULL", c))
		}
		_, err := conn.ExecContext(ctx, "CREATE TABLE "+table+" (page BIGINT NOT NULL, events INT NOT NULL, "+strings.Join(cols, ", ")+") ENGINE=InnoDB")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })
		// The pages InnoDB has given the table's clustered index, the BLOB pages included
		// (DATA_LENGTH once the statistics are taken), which is what Aurora's volume holds.
		size := func() int64 {
			var n int64
			_, err := conn.ExecContext(ctx, "ANALYZE TABLE "+table)
			require.NoError(t, err)
			require.NoError(t, conn.QueryRowContext(ctx, "SELECT DATA_LENGTH FROM information_schema.TABLES "+
				"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&n))
			return n
		}
		before := size()
		packed := 0
		for p := range int64(m.rows) {
			args := []any{p, pages.Size}
			for u := range int64(pages.Size / pages.Unit) {
				rows := make([]pages.Row, pages.Unit)
				for i := range rows {
					rows[i] = m.row(p*pages.Size + u*pages.Unit + int64(i))
				}
				_, cols, err := pages.Encode(rows)
				require.NoError(t, err)
				for _, c := range cols {
					args = append(args, c)
					packed += len(c)
				}
			}
			_, err := conn.ExecContext(ctx, "INSERT INTO "+table+" VALUES ("+strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ")+")", args...)
			require.NoError(t, err)
		}
		events := float64(m.rows * pages.Size)
		grew := size() - before
		per := float64(grew) / events
		t.Logf("%s: %d page rows, %.0f bytes an event packed, %.0f in InnoDB (%.2fx)", m.name, m.rows, float64(packed)/events, per, per/(float64(packed)/events))
		if per < m.min || per > m.max {
			t.Errorf("%s: %.0f bytes an event in InnoDB, docs/deploy.md says %v-%v: measure again and update it", m.name, per, m.min, m.max)
		}
	}
}
