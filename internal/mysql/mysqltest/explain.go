package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// ExplainPartitions returns the partitions (or subpartitions, as the server names them) that EXPLAIN
// says q reads: how the tests check that a statement is pruned as its comment says.
func ExplainPartitions(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "EXPLAIN PARTITIONS "+q)
	if err != nil {
		rows, err = db.QueryContext(ctx, "EXPLAIN "+q)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	at := -1
	for i, c := range cols {
		if strings.EqualFold(c, "partitions") {
			at = i
		}
	}
	if at == -1 {
		return nil, fmt.Errorf("EXPLAIN has no partitions column: %v", cols)
	}
	var parts []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		if vals[at].Valid {
			parts = append(parts, strings.Split(vals[at].String, ",")...)
		}
	}
	return parts, rows.Err()
}

// PartitionsOf returns the partitions (not subpartitions) EXPLAIN says q reads, sorted, each once.
func PartitionsOf(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	parts, err := ExplainPartitions(ctx, db, q)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range parts {
		name, _, _ := strings.Cut(p, "_")
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
