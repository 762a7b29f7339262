// Package bucket is the bucket lock with its directory, written once for the two stores that make
// something unique without a unique index: the idempotency keys (keystore: idempotency_buckets,
// migrations/0006) and the counter service's entities (counterstore: counter_buckets and
// counter_directories, migrations/0008).
//
// A name (a key, an entity) is hashed (SHA-256), and the first four bytes of its hash choose its
// bucket (Table.Of): a row, seeded by the migration, whose lock every transaction that writes a
// name of the bucket takes first and holds to its commit, so that two writers of one name are
// serialised and the second reads what the first committed. The bucket's directory is a blob of
// fixed-size entries (Layout: a few bytes of a name's hash and the time the entry expires), read
// under the lock (Table.Read), searched and changed in memory, and written back (Table.Write) in
// statements bounded by bytes.
//
// The statements are the stores', in their .sql files beside them, with the reasons for their locks
// (each table's are its own: the keys lock a bucket by appending to its directory, the counters by
// advancing a version); a store hands their texts to its Table.
package bucket

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// Table is one table's buckets: how many, the layout of their directories' entries, and the
// statements that lock, read and write them.
type Table struct {
	// Name names the table and the migration that seeds it, for errors: "idempotency_buckets
	// (migration 0006)".
	Name string
	// Buckets is the number of buckets: the rows the migration seeds, 0 to Buckets-1.
	Buckets int64
	// Entry is the layout of the directories' entries.
	Entry Layout

	// Lock locks the buckets /*ids*/ and changes every row it locks (so that the rows matched are
	// the rows affected, which Lock checks). "": the store locks its buckets itself.
	Lock string
	// Read returns bucket, directory and NOW(6) of the buckets /*ids*/, whose locks are held.
	Read string
	// Write sets the directories of the buckets /*ids*/: directory = CASE bucket /*cases*/ END,
	// /*cases*/ one WHEN ? THEN ? per bucket.
	Write string
}

// Of returns the bucket of a name whose hash is hash.
func (t *Table) Of(hash [32]byte) int64 {
	return int64(binary.BigEndian.Uint32(hash[:4]) % uint32(t.Buckets))
}

// Sorted returns buckets sorted, without repeats: the order every statement lists them in.
func Sorted(buckets []int64) []int64 {
	slices.Sort(buckets)
	return slices.Compact(buckets)
}

// LockBuckets runs Lock on buckets, in one statement: rows are locked in the order of its scan
// (partition, then row), the same for every transaction, so lockers of several buckets cannot
// deadlock each other. A bucket with no row is an error.
func (t *Table) LockBuckets(ctx context.Context, tx mysql.Conn, buckets []int64) error {
	q, args := mysql.ExpandIDs(t.Lock, buckets)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != int64(len(buckets)) {
		return fmt.Errorf("%s: locked %d of %d buckets: rows are missing (it seeds %d)", t.Name, n, len(buckets), t.Buckets)
	}
	return nil
}

// ReadDirectories returns the directories of buckets, whose locks the transaction holds, and the
// database's clock, which decides what has expired. A bucket with no row is an error.
func (t *Table) ReadDirectories(ctx context.Context, tx mysql.Conn, buckets []int64) (map[int64][]byte, time.Time, error) {
	q, args := mysql.ExpandIDs(t.Read, buckets)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer rows.Close()
	dirs := make(map[int64][]byte, len(buckets))
	var now time.Time
	for rows.Next() {
		var b int64
		var d []byte
		if err := rows.Scan(&b, &d, &now); err != nil {
			return nil, time.Time{}, err
		}
		dirs[b] = d
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, err
	}
	if len(dirs) != len(buckets) {
		return nil, time.Time{}, fmt.Errorf("%s: found %d of %d buckets: rows are missing (it seeds %d)", t.Name, len(dirs), len(buckets), t.Buckets)
	}
	return dirs, now, nil
}

// Directory is a bucket's directory to write.
type Directory struct {
	Bucket  int64
	Entries []byte
}

// MaxWriteBytes keeps a statement writing directories under 16 KB where it can: RDS Proxy pins the
// session of a larger statement. A directory larger by itself is written alone.
const MaxWriteBytes = 12 << 10

// WriteDirectories writes dirs, under the locks the transaction holds, as few statements as keep
// each within MaxWriteBytes of directories.
func (t *Table) WriteDirectories(ctx context.Context, tx mysql.Conn, dirs []Directory) error {
	for len(dirs) > 0 {
		n, size := 0, 0
		for n < len(dirs) && (n == 0 || size+len(dirs[n].Entries) <= MaxWriteBytes) {
			size += len(dirs[n].Entries)
			n++
		}
		batch := make([]int64, n)
		args := make([]any, 0, 3*n)
		for i, d := range dirs[:n] {
			batch[i] = d.Bucket
			args = append(args, d.Bucket, d.Entries)
		}
		q := strings.Replace(t.Write, "/*cases*/", strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", n), " "), 1)
		q, ids := mysql.ExpandIDs(q, batch)
		if _, err := tx.ExecContext(ctx, q, append(args, ids...)...); err != nil {
			return err
		}
		dirs = dirs[n:]
	}
	return nil
}

// Layout is the layout of a directory's entries: HashLen bytes of a name's hash, from byte
// HashFrom (past the four that choose the bucket), then its expiry, big-endian, in ExpiryLen bytes
// (4 or 8) of units of Unit. A name whose bytes match another's in its bucket shares its entry:
// the store's answer to that must be a careful read, never a wrong answer.
type Layout struct {
	HashFrom, HashLen, ExpiryLen int
	Unit                         time.Duration // time.Second or time.Microsecond
}

// Size is the bytes of one entry.
func (l Layout) Size() int { return l.HashLen + l.ExpiryLen }

// Name returns the bytes of hash an entry holds.
func (l Layout) Name(hash [32]byte) []byte { return hash[l.HashFrom : l.HashFrom+l.HashLen] }

// expiry returns an entry's expiry in Unix microseconds.
func (l Layout) expiry(entry []byte) int64 {
	e := entry[l.HashLen:l.Size()]
	var v int64
	if l.ExpiryLen == 4 {
		v = int64(binary.BigEndian.Uint32(e))
	} else {
		v = int64(binary.BigEndian.Uint64(e))
	}
	if l.Unit == time.Second {
		return v * 1_000_000
	}
	return v
}

// FirstExpiry returns the expiry, in Unix microseconds, of a directory's first entry (its oldest:
// entries are appended in the order they expire); 0 for an empty directory.
func (l Layout) FirstExpiry(dir []byte) int64 {
	if len(dir) < l.Size() {
		return 0
	}
	return l.expiry(dir)
}

// Find returns the expiry, in Unix microseconds, of hash's first unexpired entry in dir at nowMicro,
// or 0 if it has none.
func (l Layout) Find(dir []byte, hash [32]byte, nowMicro int64) int64 {
	name := l.Name(hash)
	for i := 0; i+l.Size() <= len(dir); i += l.Size() {
		if bytes.Equal(dir[i:i+l.HashLen], name) {
			if exp := l.expiry(dir[i:]); exp > nowMicro {
				return exp
			}
		}
	}
	return 0
}

// Live returns a copy of dir's entries unexpired at nowMicro, in their order.
func (l Layout) Live(dir []byte, nowMicro int64) []byte {
	out := make([]byte, 0, len(dir)+l.Size())
	for i := 0; i+l.Size() <= len(dir); i += l.Size() {
		if l.expiry(dir[i:]) > nowMicro {
			out = append(out, dir[i:i+l.Size()]...)
		}
	}
	return out
}

// Set returns dir with hash's entries replaced by one expiring at expiry (in Units), at the end.
func (l Layout) Set(dir []byte, hash [32]byte, expiry int64) []byte {
	name := l.Name(hash)
	out := make([]byte, 0, len(dir)+l.Size())
	for i := 0; i+l.Size() <= len(dir); i += l.Size() {
		if !bytes.Equal(dir[i:i+l.HashLen], name) {
			out = append(out, dir[i:i+l.Size()]...)
		}
	}
	out = append(out, name...)
	if l.ExpiryLen == 4 {
		return binary.BigEndian.AppendUint32(out, uint32(expiry))
	}
	return binary.BigEndian.AppendUint64(out, uint64(expiry))
}
