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

// The server parses a group's bucket statement for every group, in the stage that one group at a
// time runs (internal/api): its text grows by a few dozen bytes a key, not by an expiry expression
// or two per key and an expiry test per bucket (about 290 bytes a key before, 2.3 KB for 8 keys).
func TestBucketStatementsGrowByLittleAKey(t *testing.T) {
	for _, size := range []int{1, 8, 32} {
		appended := map[int64][]exactlyonce.KeyedCreate{}
		var buckets []int64
		for i := range size {
			b := int64(i) * 40 // distinct buckets: the most cases
			buckets = append(buckets, b)
			appended[b] = append(appended[b], exactlyonce.KeyedCreate{Key: sha256.Sum256(fmt.Append(nil, i))})
		}
		fresh, freshArgs, ok := freshStatement(buckets, appended, 86400)
		if !ok {
			t.Fatalf("%d keys: the fresh path refused its own statement", size)
		}
		lock, lockArgs := lockStatement(buckets, appended, 86400)
		for name, n := range map[string]int{"FreshKeyBuckets": statementSize(fresh, freshArgs) - len(queries.FreshKeyBuckets),
			"LockKeyBuckets": statementSize(lock, lockArgs) - len(queries.LockKeyBuckets)} {
			t.Logf("%s, %d keys: %d bytes beyond its text", name, size, n)
			if n > 120*size {
				t.Errorf("%s of %d keys in distinct buckets: %d bytes beyond its text, more than 120 a key", name, size, n)
			}
		}
	}
}
