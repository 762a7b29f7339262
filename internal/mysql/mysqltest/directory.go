package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// ForgetReferenceDirectory empties every reference's directory and marks its backfill not begun:
// the database as migration 0016 leaves one that held tasks before it (taskstore/backfill.go).
func ForgetReferenceDirectory(ctx context.Context, db *sql.DB) error {
	sets := make([]string, 100)
	for i := range sets {
		sets[i] = fmt.Sprintf("d%d = ''", i)
	}
	if _, err := db.ExecContext(ctx, strings.Replace(queries.ForgetDirectory, "/*sets*/", strings.Join(sets, ", "), 1)); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, queries.BackfillNotBegun)
	return err
}
