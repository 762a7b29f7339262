package mysqltest

import (
	"context"
	"database/sql"
	"strings"
)

// LoadAttempts stores n failed delivery attempts of task id, numbered first to first+n-1, a
// microsecond apart, each with errText: what a task retried by hand again and again keeps (the
// attempts' pages of GET /events/{id}/attempts are tested on it). Statements of 500 attempts.
func LoadAttempts(ctx context.Context, db *sql.DB, id int64, first, n int, errText string) error {
	for lo := first; lo < first+n; lo += 500 {
		hi := min(lo+500, first+n)
		rows := strings.TrimSuffix(strings.Repeat("(?, ?, NOW(6) + INTERVAL ? MICROSECOND, 1000, 503, ?, 'seed'), ", hi-lo), ", ")
		args := make([]any, 0, 4*(hi-lo))
		for k := lo; k < hi; k++ {
			args = append(args, id, k, k, errText)
		}
		if _, err := db.ExecContext(ctx, strings.Replace(queries.LoadAttempts, "/*rows*/", rows, 1), args...); err != nil {
			return err
		}
	}
	return nil
}
