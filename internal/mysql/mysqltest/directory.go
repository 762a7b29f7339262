package mysqltest

import (
	"context"
	"database/sql"
	"encoding/binary"
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
	if _, err := db.ExecContext(ctx, queries.ForgetDirectoryLog); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, queries.BackfillNotBegun)
	return err
}

// FillDirectoryCell appends n entries of other references (tags no reference has: their tasks do
// not exist, and no reader fetches them) to column of slot of reference_directory: the cell as a
// history of tasks fills it (taskstore's 24-byte entries).
func FillDirectoryCell(ctx context.Context, db *sql.DB, slot int64, column, n int) error {
	b := make([]byte, 0, 24*n)
	for i := range n {
		var e [24]byte
		binary.BigEndian.PutUint64(e[:8], 0xfeedfacecafe0000|uint64(i))
		binary.BigEndian.PutUint64(e[8:16], uint64(1<<50+i))
		binary.BigEndian.PutUint64(e[16:], uint64(i))
		b = append(b, e[:]...)
	}
	_, err := db.ExecContext(ctx, strings.ReplaceAll(queries.FillDirectoryCell, "/*column*/", fmt.Sprintf("d%d", column)), b, slot)
	return err
}
