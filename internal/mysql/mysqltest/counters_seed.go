package mysqltest

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
)

// LoadCounters stores n counted entities (the benchmark's history), as the consumer would have
// stored them had it received an "added" for each: entity "seed-<i>" of type types[i % len(types)]
// of user "seed-user-<i % users>". It writes the facts, the directories and the sums directly, in
// large statements, on a database whose counter tables are empty; it is not safe beside
// consumers. onChunk hears of progress.
//
// A counted entity's directory entry is 8 bytes of its hash and, for ever, the largest expiry
// (counterstore's counterEntryForever); TestLoadCounters checks that the consumer takes the
// entities loaded so for counted.
func LoadCounters(ctx context.Context, db *sql.DB, n int64, users int, types []string, onChunk func(done int64)) error {
	dirs := map[int64][]byte{}
	sums := map[exactlyonce.CounterKey]int64{}
	const chunk = 2000
	for lo := int64(0); lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		var rows []string
		var args []any
		for i := lo; i < hi; i++ {
			m := exactlyonce.CounterMessage{EntityID: fmt.Sprint("seed-", i), EntityType: types[i%int64(len(types))],
				UserID: fmt.Sprint("seed-user-", i%int64(users)), Action: exactlyonce.CounterAdded}
			h := m.EntityHash()
			b := counterstore.EntityBucket(h)
			dirs[b] = binary.BigEndian.AppendUint64(append(dirs[b], h[8:16]...), uint64(counterEntryForever))
			sums[m.Key()]++
			rows = append(rows, "(?, 1, ?, ?, ?, ?, NOW(6))")
			args = append(args, counterstore.UserBucket(m.UserID), h[:], m.EntityType, m.UserID, m.EntityID)
		}
		if _, err := db.ExecContext(ctx, strings.Replace(queries.LoadCounterFacts, "/*rows*/", strings.Join(rows, ", "), 1), args...); err != nil {
			return fmt.Errorf("load counter facts: %w", err)
		}
		if onChunk != nil {
			onChunk(hi)
		}
	}
	for b, d := range dirs {
		if _, err := db.ExecContext(ctx, queries.LoadCounterDirectory, d, b); err != nil {
			return fmt.Errorf("load counter directories: %w", err)
		}
	}
	var rows []string
	var args []any
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		_, err := db.ExecContext(ctx, strings.Replace(queries.LoadCounterSums, "/*rows*/", strings.Join(rows, ", "), 1), args...)
		rows, args = nil, nil
		return err
	}
	for k, v := range sums {
		rows = append(rows, "(?, ?, ?, ?, ?, NOW(6))")
		args = append(args, counterstore.UserBucket(k.UserID), k.EntityType, k.UserID, v, v)
		if len(rows) == 1000 {
			if err := flush(); err != nil {
				return fmt.Errorf("load counter sums: %w", err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("load counter sums: %w", err)
	}
	return nil
}

// counterEntryForever is counterstore's: the expiry of a counted entity's directory entry.
const counterEntryForever = math.MaxInt64
