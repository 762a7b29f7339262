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
	cases, args := appendCases(buckets, appended, ttlSeconds)
	checks := make([]string, 0, len(buckets))
	var checkArgs []any
	for _, b := range buckets {
		absent := make([]string, 0, len(appended[b]))
		checkArgs = append(checkArgs, b)
		for _, c := range appended[b] {
			absent = append(absent, "LOCATE(?, directory) = 0")
			checkArgs = append(checkArgs, keyBuckets.Entry.Name(c.Key))
		}
		checks = append(checks, "WHEN ? THEN "+strings.Join(absent, " AND "))
	}
	q := strings.Replace(queries.FreshKeyBuckets, "/*cases*/", cases, 1)
	q = strings.Replace(q, "/*fresh*/", strings.Join(checks, " "), 1)
	q, bucketArgs := mysql.ExpandIDs(q, buckets)
	// In the order of the text: the cases and the expiry, the bucket ids, the oldest entry's
	// bound, the checks.
	all := append(append(append(args, bucketArgs...), ttlSeconds/4), checkArgs...)
	return q, all, len(q)+interpolatedSize(all) <= maxKeyStatement
}

// appendCases is the /*cases*/ of FreshKeyBuckets and LockKeyBuckets, with their arguments and the
// TTL's seconds for the expiry the statement ends the appended bytes with: each bucket's new keys'
// 4 bytes, every one but the last followed by its expiry (entryExpiry), the same for every entry
// of the statement.
func appendCases(buckets []int64, appended map[int64][]exactlyonce.KeyedCreate, ttlSeconds int64) (string, []any) {
	var b strings.Builder
	var args []any
	for _, bk := range buckets {
		args = append(args, bk)
		cs := appended[bk]
		if len(cs) == 1 {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, keyBuckets.Entry.Name(cs[0].Key))
			continue
		}
		b.WriteString(" WHEN ? THEN CONCAT(")
		for i, c := range cs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("?")
			args = append(args, keyBuckets.Entry.Name(c.Key))
			if i < len(cs)-1 {
				b.WriteString(", " + entryExpiry)
				args = append(args, ttlSeconds)
			}
		}
		b.WriteString(")")
	}
	return b.String(), append(args, ttlSeconds)
}

// lockStatement is LockKeyBuckets for buckets, appending each bucket's new entries: one statement,
// so that every transaction locks the rows in the order of one scan. A group of
// exactlyonce.MaxKeyedGroup keys keeps it under 12 KB (TestKeyedStatementsStayUnder16KB).
func lockStatement(buckets []int64, appended map[int64][]exactlyonce.KeyedCreate, ttlSeconds int64) (string, []any) {
	cases, args := appendCases(buckets, appended, ttlSeconds)
	q, bucketArgs := mysql.ExpandIDs(strings.Replace(queries.LockKeyBuckets, "/*cases*/", cases, 1), buckets)
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
