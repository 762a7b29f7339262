package keystore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// The statements of a keyed create's transaction that are built per group (idempotency.go), and
// the bounds that keep each under the 16 KB beyond which RDS Proxy pins a session.

func keyCount(appended map[int64][]exactlyonce.KeyedCreate) int {
	n := 0
	for _, cs := range appended {
		n += len(cs)
	}
	return n
}

// freshStatement is FreshKeyBuckets for buckets: it appends each bucket's new entries where the
// directory holds none of the bucket's keys (no entry's bytes match a key's 4; a match elsewhere
// in the directory only sends the group down the careful path) and its oldest entry has not been
// expired for more than a quarter of the TTL (else the careful path rewrites it). ok is false when
// the statement would pass maxKeyStatement: the careful path's statements are smaller.
func freshStatement(buckets []int64, appended map[int64][]exactlyonce.KeyedCreate, ttlSeconds int64) (string, []any, bool) {
	var cases, checks []string
	var args, checkArgs []any
	for _, b := range buckets {
		parts := make([]string, 0, 2*len(appended[b]))
		absent := make([]string, 0, len(appended[b])+1)
		args = append(args, b)
		checkArgs = append(checkArgs, b)
		for _, c := range appended[b] {
			parts = append(parts, "?", entryExpiry)
			args = append(args, keyBuckets.Entry.Name(c.Key), ttlSeconds)
			absent = append(absent, "LOCATE(?, directory) = 0")
			checkArgs = append(checkArgs, keyBuckets.Entry.Name(c.Key))
		}
		absent = append(absent, "(directory = '' OR SUBSTRING(directory, 5, 4) >= "+entryStale+")")
		checkArgs = append(checkArgs, ttlSeconds/4)
		cases = append(cases, "WHEN ? THEN CONCAT("+strings.Join(parts, ", ")+")")
		checks = append(checks, "WHEN ? THEN "+strings.Join(absent, " AND "))
	}
	q := strings.Replace(queries.FreshKeyBuckets, "/*cases*/", strings.Join(cases, " "), 1)
	q = strings.Replace(q, "/*fresh*/", strings.Join(checks, " "), 1)
	q, bucketArgs := mysql.ExpandIDs(q, buckets)
	all := append(append(args, bucketArgs...), checkArgs...)
	return q, all, len(q)+interpolatedSize(all) <= maxKeyStatement
}

// entryStale is the SQL of the expiry, as a directory holds it, a quarter of the TTL ago (the one
// ? it holds: the TTL's seconds / 4).
const entryStale = "UNHEX(LPAD(HEX(CEIL(UNIX_TIMESTAMP(NOW(6)))-?),8,0))"

// lockStatement is LockKeyBuckets for buckets, appending each bucket's new entries: one statement,
// so that every transaction locks the rows in the order of one scan. A group of
// exactlyonce.MaxKeyedGroup keys keeps it under 12 KB (TestKeyedStatementsStayUnder16KB).
func lockStatement(buckets []int64, appended map[int64][]exactlyonce.KeyedCreate, ttlSeconds int64) (string, []any) {
	var cases []string
	var args []any
	for _, b := range buckets {
		parts := make([]string, 0, 2*len(appended[b]))
		args = append(args, b)
		for _, c := range appended[b] {
			parts = append(parts, "?", entryExpiry)
			args = append(args, keyBuckets.Entry.Name(c.Key), ttlSeconds)
		}
		cases = append(cases, "WHEN ? THEN CONCAT("+strings.Join(parts, ", ")+")")
	}
	q, bucketArgs := mysql.ExpandIDs(strings.Replace(queries.LockKeyBuckets, "/*cases*/", strings.Join(cases, " "), 1), buckets)
	return q, append(args, bucketArgs...)
}

// keyRowArgs is how many arguments one row of InsertKeys takes.
const keyRowArgs = 7

// insertKeys inserts the keys' rows, as many a statement as keep it under maxKeyStatement bytes
// once the driver has put the arguments in (a key's answer is up to 4 KB).
func insertKeys(ctx context.Context, tx mysql.Conn, rows []string, args []any) error {
	for len(rows) > 0 {
		n := keyRowsFitting(rows, args)
		q := strings.Replace(queries.InsertKeys, "/*rows*/", strings.Join(rows[:n], ", "), 1)
		if err := execDiscard(ctx, tx, q, args[:n*keyRowArgs]...); err != nil {
			return err
		}
		rows, args = rows[n:], args[n*keyRowArgs:]
	}
	return nil
}

// keyRowsFitting returns how many of the rows (at least one) an InsertKeys statement takes
// without passing maxKeyStatement bytes.
func keyRowsFitting(rows []string, args []any) int {
	n, size := 0, len(queries.InsertKeys)
	for n < len(rows) {
		row := len(rows[n]) + 2 + interpolatedSize(args[n*keyRowArgs:(n+1)*keyRowArgs])
		if n > 0 && size+row > maxKeyStatement {
			break
		}
		n, size = n+1, size+row
	}
	return n
}

// maxKeyStatement bounds a statement inserting keys: RDS Proxy pins the session of a statement
// over 16 KB.
const maxKeyStatement = 12 << 10

// interpolatedSize bounds the bytes args take in a statement once the driver has interpolated
// them (interpolateParams): a byte string as _binary'...' with every byte escaped at worst, a
// string quoted and escaped at worst, a number as its digits, a time as a quoted timestamp.
func interpolatedSize(args []any) int {
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			n += 2*len(v) + 10
		case string:
			n += 2*len(v) + 2
		case int64:
			n += len(strconv.FormatInt(v, 10))
		case int:
			n += len(strconv.Itoa(v))
		case time.Time:
			n += len("'2006-01-02 15:04:05.999999'")
		default:
			n += 30
		}
	}
	return n
}
