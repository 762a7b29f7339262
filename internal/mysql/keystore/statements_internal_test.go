package keystore

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// statementSize bounds the bytes q takes once the driver has interpolated args into it.
func statementSize(q string, args []any) int {
	return len(q) - strings.Count(q, "?") + interpolatedSize(args)
}

// RDS Proxy pins the session of a statement over 16 KB: a keyed group's statements stay under 12
// KB, the lock of the largest group in one statement, the keys' rows in as many as they need.
func TestKeyedStatementsStayUnder16KB(t *testing.T) {
	appended := map[int64][]exactlyonce.KeyedCreate{}
	var buckets []int64
	var rows []string
	var args []any
	for i := range exactlyonce.MaxKeyedGroup {
		key := sha256.Sum256(fmt.Append(nil, i))
		b := int64(i) * 40 // distinct buckets: the most cases
		buckets = append(buckets, b)
		appended[b] = append(appended[b], exactlyonce.KeyedCreate{Key: key})
		body := make([]byte, 4096) // the longest answer the column holds, every byte escaped
		for j := range body {
			body[j] = '"'
		}
		rows = append(rows, "(?, ?, ?, ?, ?, ?, NOW(6), ?)")
		args = append(args, b, key[:], key[:], 201, body, int64(i), time.Now())
	}
	slices.Sort(buckets)
	q, a := lockStatement(buckets, appended, 86400)
	t.Logf("lock: %d bytes", statementSize(q, a))
	if n := statementSize(q, a); n > 12<<10 {
		t.Fatalf("the lock of a group of %d keys takes %d bytes", exactlyonce.MaxKeyedGroup, n)
	}
	statements := 0
	for len(rows) > 0 {
		n := keyRowsFitting(rows, args)
		if n < 1 {
			t.Fatal("no row fits")
		}
		q := strings.Replace(queries.InsertKeys, "/*rows*/", strings.Join(rows[:n], ", "), 1)
		if size := statementSize(q, args[:n*keyRowArgs]); size > 16<<10 {
			t.Fatalf("an InsertKeys of %d rows takes %d bytes", n, size)
		}
		rows, args = rows[n:], args[n*keyRowArgs:]
		statements++
	}
	if statements != exactlyonce.MaxKeyedGroup {
		t.Fatalf("answers of 4 KB: one row a statement, got %d statements for %d rows", statements, exactlyonce.MaxKeyedGroup)
	}
}
