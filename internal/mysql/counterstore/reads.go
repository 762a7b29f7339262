package counterstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// What the sweeper and the API do with what the consumer wrote: publish the notifications left
// unpublished, prune, reconcile a sample of counts, and read a user's counts.

// MarkCounterPublished records that the notifications with these ids were published.
func (s *Store) MarkCounterPublished(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(ids))
	for _, id := range ids {
		b, err := hex.DecodeString(id)
		if err != nil {
			return fmt.Errorf("mark counter notifications published: id %q: %w", id, err)
		}
		args = append(args, b)
	}
	q := strings.Replace(queries.MarkCounterNotificationsPublished, "/*ids*/", mysql.Placeholders(len(ids)), 1)
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return mysql.Interpret("mark counter notifications published", err)
	}
	return nil
}

// UnpublishedCounterResults returns up to limit notifications recorded more than olderThan ago
// and not published yet, as published bodies (JSON) by id.
func (s *Store) UnpublishedCounterResults(ctx context.Context, olderThan time.Duration, limit int) (map[string][]byte, error) {
	rows, err := s.db.QueryContext(ctx, queries.UnpublishedCounterNotifications, olderThan.Microseconds(), limit)
	if err != nil {
		return nil, mysql.Interpret("unpublished counter notifications", err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var id, body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return nil, mysql.Interpret("unpublished counter notifications", err)
		}
		out[hex.EncodeToString(id)] = body
	}
	return out, mysql.Interpret("unpublished counter notifications", rows.Err())
}

// PruneCounterNotifications deletes up to limit notifications published more than age ago, in
// batches of at most batch, and returns how many.
func (s *Store) PruneCounterNotifications(ctx context.Context, age time.Duration, batch, limit int) (int, error) {
	return pruneLoop(batch, limit, func(n int) (int64, error) {
		res, err := s.db.ExecContext(ctx, queries.PruneCounterNotifications, int64(age.Seconds()), n)
		if err != nil {
			return 0, mysql.Interpret("prune counter notifications", err)
		}
		return res.RowsAffected()
	})
}

// PruneReadCounterEntities deletes the facts of up to limit entities read more than
// CounterReadRetention ago, in batches of at most batch entities, and returns how many entities.
// It takes the entities of one subpartition of t_counter, that of the first old entity it finds, so
// that each delete scans an eighth of the facts; the next call takes the next that has any. With
// nothing to prune it is one statement, as it always was.
func (s *Store) PruneReadCounterEntities(ctx context.Context, batch, limit int) (int, error) {
	retention := int64(CounterReadRetention.Seconds())
	var first int64
	err := s.db.QueryRowContext(ctx, queries.FirstOldReadCounterEntity, retention).Scan(&first)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	if err != nil {
		return 0, mysql.Interpret("prune read counter entities", err)
	}
	return s.pruneReadCounterEntities(ctx, first%CounterFactSubpartitions, batch, limit)
}

// pruneReadCounterEntities is PruneReadCounterEntities in subpartition sub.
func (s *Store) pruneReadCounterEntities(ctx context.Context, sub int64, batch, limit int) (int, error) {
	retention := int64(CounterReadRetention.Seconds())
	old := strings.Replace(queries.OldReadCounterEntities, "/*subpartition*/", fmt.Sprintf("was_readsp%d", sub), 1)
	return pruneLoop(batch, limit, func(n int) (int64, error) {
		rows, err := s.db.QueryContext(ctx, old, retention, n)
		if err != nil {
			return 0, mysql.Interpret("prune read counter entities", err)
		}
		var buckets []int64
		var hashes []any
		for rows.Next() {
			var b int64
			var h []byte
			if err := rows.Scan(&b, &h); err != nil {
				rows.Close()
				return 0, mysql.Interpret("prune read counter entities", err)
			}
			buckets = append(buckets, b)
			hashes = append(hashes, h)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, mysql.Interpret("prune read counter entities", err)
		}
		if len(hashes) == 0 {
			return 0, nil
		}
		slices.Sort(buckets)
		buckets = slices.Compact(buckets)
		q, args := mysql.ExpandIDs(queries.DeleteCounterEntities, buckets)
		q = strings.Replace(q, "/*hashes*/", mysql.Placeholders(len(hashes)), 1)
		args = append(append(args, hashes...), retention)
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			return 0, mysql.Interpret("prune read counter entities", err)
		}
		return int64(len(hashes)), nil
	})
}

// pruneLoop runs step (which deletes up to n and says how many) until limit is reached or a step
// comes back short.
func pruneLoop(batch, limit int, step func(n int) (int64, error)) (int, error) {
	total := 0
	for total < limit {
		n := min(batch, limit-total)
		got, err := step(n)
		if err != nil {
			return total, err
		}
		total += int(got)
		if got < int64(n) {
			break
		}
	}
	return total, nil
}

// ReconcileCounters checks the counts of the users of buckets, at most limit counts, and returns
// how many it checked and those that are wrong. It reads the facts of the buckets of one
// subpartition of t_counter (the same remainder modulo CounterFactSubpartitions) in one statement,
// so a sample drawn by RandomCounterBuckets costs one scan of an eighth of the facts; buckets of
// several subpartitions cost one statement each.
func (s *Store) ReconcileCounters(ctx context.Context, buckets []int64, limit int) (int, []exactlyonce.CounterMismatch, error) {
	bySub := map[int64][]int64{}
	var subs []int64
	for _, b := range buckets {
		sub := b % CounterFactSubpartitions
		if bySub[sub] == nil {
			subs = append(subs, sub)
		}
		bySub[sub] = append(bySub[sub], b)
	}
	slices.Sort(subs)
	checked := 0
	var bad []exactlyonce.CounterMismatch
	for _, sub := range subs {
		if checked >= limit {
			break
		}
		n, wrong, err := s.reconcile(ctx, bySub[sub], limit-checked)
		if err != nil {
			return checked, bad, mysql.Interpret("reconcile counters", err)
		}
		checked += n
		bad = append(bad, wrong...)
	}
	return checked, bad, nil
}

// reconcile is ReconcileCounters for buckets of one subpartition: one statement.
func (s *Store) reconcile(ctx context.Context, buckets []int64, limit int) (int, []exactlyonce.CounterMismatch, error) {
	retention := int64(CounterReadRetention.Seconds())
	q, args := mysql.ExpandIDs(queries.ReconcileCounterSums, buckets)
	args = append(args, limit, retention, retention)
	q, more := mysql.ExpandIDs(q, buckets)
	rows, err := s.db.QueryContext(ctx, q, append(args, more...)...)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	n := 0
	var bad []exactlyonce.CounterMismatch
	for rows.Next() {
		var m exactlyonce.CounterMismatch
		if err := rows.Scan(&m.Key.EntityType, &m.Key.UserID, &m.Sum, &m.Counted, &m.Duplicated); err != nil {
			return n, bad, err
		}
		n++
		if m.Sum != m.Counted || m.Duplicated != 0 {
			bad = append(bad, m)
		}
	}
	return n, bad, rows.Err()
}

// CounterSums returns every count of a user by entity type (none: an empty map), a page at a time
// (CounterSumsAfter): for tests and tools; the API answers a page.
func (s *Store) CounterSums(ctx context.Context, userID string) (map[string]exactlyonce.CounterSum, error) {
	out := map[string]exactlyonce.CounterSum{}
	after := ""
	for {
		page, err := s.CounterSumsAfter(ctx, userID, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, c := range page {
			out[c.EntityType] = c.CounterSum
		}
		if len(page) < 1000 {
			return out, nil
		}
		after = page[len(page)-1].EntityType
	}
}

// CounterSumsAfter returns up to limit counts of a user, those of the entity types after after, in
// byte order ("" for the first page).
func (s *Store) CounterSumsAfter(ctx context.Context, userID, after string, limit int) ([]exactlyonce.TypeCount, error) {
	rows, err := s.db.QueryContext(ctx, queries.CounterSumsOfUser, UserBucket(userID), userID, after, limit)
	if err != nil {
		return nil, mysql.Interpret("counter sums", err)
	}
	defer rows.Close()
	var out []exactlyonce.TypeCount
	for rows.Next() {
		var c exactlyonce.TypeCount
		if err := rows.Scan(&c.EntityType, &c.Sum, &c.Version); err != nil {
			return nil, mysql.Interpret("counter sums", err)
		}
		out = append(out, c)
	}
	return out, mysql.Interpret("counter sums", rows.Err())
}

// CounterSum returns one count; an unknown one is zero at version zero.
func (s *Store) CounterSum(ctx context.Context, k exactlyonce.CounterKey) (exactlyonce.CounterSum, error) {
	var v exactlyonce.CounterSum
	err := s.db.QueryRowContext(ctx, queries.CounterSumOf, UserBucket(k.UserID), k.UserID, k.EntityType).Scan(&v.Sum, &v.Version)
	if err == sql.ErrNoRows {
		return exactlyonce.CounterSum{}, nil
	}
	if err != nil {
		return v, mysql.Interpret("counter sum", err)
	}
	return v, nil
}

// CounterFactSubpartitions is the number of subpartitions of each kind of t_counter (HASH(bucket),
// migration 0008): a bucket's facts are in subpartition bucket % 8 of its kind.
const CounterFactSubpartitions = 8

// RandomCounterBuckets returns n distinct user buckets chosen at random (the sweeper's sample), all
// of one subpartition of t_counter chosen at random while n fits in one (1,024 buckets), so that
// their reconciliation reads one eighth of the facts (ReconcileCounters); more take the next
// subpartitions whole, in a random order.
func (s *Store) RandomCounterBuckets(n int) []int64 {
	per := CounterBuckets / CounterFactSubpartitions
	n = max(0, min(n, CounterBuckets))
	out := make([]int64, 0, n)
	for _, sub := range mrand.Perm(CounterFactSubpartitions) {
		if len(out) == n {
			break
		}
		for _, j := range mrand.Perm(per)[:min(per, n-len(out))] {
			out = append(out, int64(sub+CounterFactSubpartitions*j))
		}
	}
	return out
}
