package mysql_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The server holds a row of events in a buffer as wide as the columns' declared sizes, and InnoDB
// fills each SQL NULL by copying the column's default across all of its width, on every read of
// the row. The drain reads each row three times (the claim, the settling UPDATE's scan, its re-read
// by position), and a plain event's task columns are NULL: with url VARCHAR(2048) and last_error
// VARCHAR(1024) in utf8mb4 those copies were about 12 KB a read, a fifth of the server's CPU per
// drained event (migration 0015). This keeps the declared width of the columns a plain event
// leaves NULL from growing back unnoticed: a new wide column belongs in a TEXT or BLOB type (10 or
// 11 bytes of buffer), or in a table of its own.
func TestEventsNullColumnsStayNarrow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 2)
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COALESCE(CHARACTER_OCTET_LENGTH, 0)
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events'`)
	require.NoError(t, err)
	defer rows.Close()
	widths := map[string]int64{}
	var total int64
	for rows.Next() {
		var name, typ string
		var octets int64
		require.NoError(t, rows.Scan(&name, &typ, &octets))
		if typ != "varchar" && typ != "varbinary" && typ != "char" && typ != "binary" {
			continue // numbers and dates are a few bytes; TEXT and BLOB a length and a pointer
		}
		widths[name] = octets
		total += octets
	}
	require.NoError(t, rows.Err())
	require.Contains(t, widths, "url", "url is a bounded string column")
	require.LessOrEqual(t, widths["url"], int64(2048), "url's buffer: the API's 2,048 bytes, not 2,048 utf8mb4 characters")
	require.NotContains(t, widths, "last_error", "last_error is TEXT: every writer cuts it to 1,024 bytes")
	// value 1,020 + reference_id 1,020 + url 2,048 + kind, processed_by, claim_id, worker_id (384).
	require.LessOrEqual(t, total, int64(4600), "declared string widths of events, bytes: %v", widths)
}
