package counterstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func cmsg(entity, typ, user, action string) exactlyonce.CounterMessage {
	return exactlyonce.CounterMessage{EntityID: entity, EntityType: typ, UserID: user, Action: action}
}

func applyOne(t *testing.T, s *wire.Stores, m exactlyonce.CounterMessage) exactlyonce.CounterResult {
	t.Helper()
	r, err := s.Counters.ApplyCounterMessages(context.Background(), []exactlyonce.CounterMessage{m})
	require.NoError(t, err)
	require.Len(t, r, 1)
	return r[0]
}

// An entity counts once however often it is added, stops counting once read, and a duplicate or
// late "added" after its "readed" does not bring it back; every message gets a result.
func TestCounterDuplicatesAndLateAdded(t *testing.T) {
	t.Parallel()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	add, read := cmsg("m1", "message", "u1", exactlyonce.CounterAdded), cmsg("m1", "message", "u1", exactlyonce.CounterRead)
	steps := []struct {
		m       exactlyonce.CounterMessage
		applied bool
		sum     int64
		version int64
	}{
		{add, true, 1, 1},
		{add, false, 1, 1}, // duplicate
		{cmsg("m2", "message", "u1", exactlyonce.CounterAdded), true, 2, 2}, // another entity
		{read, true, 1, 3},
		{read, false, 1, 3}, // duplicate
		{add, false, 1, 3},  // late duplicate "added": stays read
		{cmsg("m1", "message", "U1", exactlyonce.CounterAdded), true, 1, 1}, // another user (case matters)
	}
	for i, st := range steps {
		r := applyOne(t, s, st.m)
		require.Equal(t, st.applied, r.Applied, "step %d", i)
		require.Equal(t, st.sum, r.Sum, "step %d", i)
		require.Equal(t, st.version, r.Version, "step %d", i)
		require.Len(t, r.ID, 32)
	}
	v, err := s.Counters.CounterSum(context.Background(), exactlyonce.CounterKey{EntityType: "message", UserID: "u1"})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{Sum: 1, Version: 3}, v)
	v, err = s.Counters.CounterSum(context.Background(), exactlyonce.CounterKey{EntityType: "nothing", UserID: "u1"})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{}, v)
	all, err := s.Counters.CounterSums(context.Background(), "u1")
	require.NoError(t, err)
	require.Equal(t, map[string]exactlyonce.CounterSum{"message": {Sum: 1, Version: 3}}, all)
}

// A "readed" that arrives before its "added" keeps the "added" from counting; the count never
// goes below zero.
func TestCounterReadBeforeAdded(t *testing.T) {
	t.Parallel()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	r := applyOne(t, s, cmsg("e", "dialog", "u", "readed"))
	require.Equal(t, exactlyonce.CounterResult{ID: r.ID, EntityID: "e", EntityType: "dialog", UserID: "u", Action: "readed"}, r)
	r = applyOne(t, s, cmsg("e", "dialog", "u", "added"))
	require.False(t, r.Applied)
	require.Zero(t, r.Sum)
	require.Zero(t, r.Version)
}

// A batch reads back the counts it names, not every count of its users: a user with many entity
// types (a count per dialog, say) must not make each of its messages read all of them. A user with
// 300 types; a batch for two of them, one stored and one new, reads one sum row (it read 300
// when it read the user's counts), and its results go on from the stored sums.
func TestCounterBatchReadsOnlyItsCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 2)
	db, tally := mysqltest.TalliedDB(t, dsn, 2, "FROM t_counter_sum")
	s, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	const types = 300
	var ms []exactlyonce.CounterMessage
	for i := range types {
		ms = append(ms, cmsg("e", fmt.Sprintf("dialog-%03d", i), "many", "added"))
	}
	_, err = s.Counters.ApplyCounterMessages(ctx, ms)
	require.NoError(t, err)
	all, err := s.Counters.CounterSums(ctx, "many")
	require.NoError(t, err)
	require.Len(t, all, types)

	before := tally.Rows()
	rs, err := s.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{
		cmsg("f", "dialog-007", "many", "added"), cmsg("e", "dialog-new", "many", "added"), cmsg("f", "dialog-007", "many", "added")})
	require.NoError(t, err)
	require.EqualValues(t, 1, tally.Rows()-before, "sum rows the batch read back")
	var got []string
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%s %v %d %d", r.EntityType, r.Applied, r.Sum, r.Version))
	}
	require.Equal(t, []string{"dialog-007 true 2 2", "dialog-new true 1 1", "dialog-007 false 2 2"}, got)
}

// Within one batch, messages are applied in their order, duplicates included.
func TestCounterBatchAppliesInOrder(t *testing.T) {
	t.Parallel()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ms := []exactlyonce.CounterMessage{
		cmsg("a", "t", "u", "added"), cmsg("a", "t", "u", "added"), cmsg("b", "t", "u", "added"),
		cmsg("a", "t", "u", "readed"), cmsg("a", "t", "u", "added"), cmsg("c", "t", "v", "added"),
	}
	rs, err := s.Counters.ApplyCounterMessages(context.Background(), ms)
	require.NoError(t, err)
	var got []string
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%s/%s %v %d %d", r.UserID, r.EntityID, r.Applied, r.Sum, r.Version))
	}
	require.Equal(t, []string{"u/a true 1 1", "u/a false 1 1", "u/b true 2 2", "u/a true 1 3", "u/a false 1 3", "v/c true 1 1"}, got)
	// The next batch starts from what this one committed: the sums exist now.
	rs, err = s.Counters.ApplyCounterMessages(context.Background(), []exactlyonce.CounterMessage{cmsg("d", "t", "u", "added"), cmsg("c", "t", "v", "readed")})
	require.NoError(t, err)
	require.Equal(t, int64(2), rs[0].Sum)
	require.Equal(t, int64(4), rs[0].Version)
	require.Equal(t, int64(0), rs[1].Sum)
	require.Equal(t, int64(2), rs[1].Version)
}

// Many messages for one key at once, from concurrent transactions, with duplicates and reads:
// the sum is the number of entities counted, the version the number of applied changes, and the
// key's sum row is created once.
func TestCounterConcurrentMessagesForOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	const entities, workers = 200, 8
	var ms []exactlyonce.CounterMessage
	for e := range entities {
		id := fmt.Sprint(e)
		for range 1 + e%3 {
			ms = append(ms, cmsg(id, "message", "hot", "added"))
		}
		if e%2 == 0 {
			ms = append(ms, cmsg(id, "message", "hot", "readed"), cmsg(id, "message", "hot", "readed"))
		}
	}
	rand.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	var mu sync.Mutex
	applied := 0
	next := 0
	together(t, workers, func(int) error {
		for {
			mu.Lock()
			if next >= len(ms) {
				mu.Unlock()
				return nil
			}
			n := min(1+rand.IntN(4), len(ms)-next)
			batch := ms[next : next+n]
			next += n
			mu.Unlock()
			rs, err := s.Counters.ApplyCounterMessages(ctx, batch)
			if err != nil {
				return err
			}
			mu.Lock()
			for _, r := range rs {
				if r.Applied {
					applied++
				}
			}
			mu.Unlock()
		}
	})
	// Counted: entities whose first message (in the order applied) was an "added" and that were
	// never read: odd entities always; even ones never (their read is remembered whatever the order).
	v, err := s.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: "message", UserID: "hot"})
	require.NoError(t, err)
	require.Equal(t, int64(entities/2), v.Sum)
	require.Equal(t, int64(applied), v.Version)
	var rows int
	require.NoError(t, s.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM t_counter_sum").Scan(&rows))
	require.Equal(t, 1, rows)
	checked, bad, err := s.Counters.ReconcileCounters(ctx, []int64{counterstore.UserBucket("hot")}, 10)
	require.NoError(t, err)
	require.Equal(t, 1, checked)
	require.Empty(t, bad)
}

// Many new keys of one user bucket at once: each sum row is created once.
func TestCounterSumRowsCreatedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	together(t, 8, func(w int) error {
		for i := range 20 {
			// Every worker sends the same messages: each key's row must be created once.
			if _, err := s.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{
				cmsg(fmt.Sprint(i), fmt.Sprint("type", i%5), "u", "added")}); err != nil {
				return err
			}
		}
		return nil
	})
	var rows int
	require.NoError(t, s.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM t_counter_sum").Scan(&rows))
	require.Equal(t, 5, rows)
	all, err := s.Counters.CounterSums(ctx, "u")
	require.NoError(t, err)
	for typ, v := range all {
		require.Equal(t, exactlyonce.CounterSum{Sum: 4, Version: 4}, v, typ)
	}
}

// The reconciliation finds a sum that differs from its facts.
func TestReconcileFindsABrokenSum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	for i := range 3 {
		applyOne(t, s, cmsg(fmt.Sprint(i), "t", "u", "added"))
	}
	applyOne(t, s, cmsg("0", "t", "u", "readed"))
	b := []int64{counterstore.UserBucket("u")}
	_, bad, err := s.Counters.ReconcileCounters(ctx, b, 10)
	require.NoError(t, err)
	require.Empty(t, bad)
	_, err = s.DB.Pool().ExecContext(ctx, "UPDATE t_counter_sum SET sum = sum + 1")
	require.NoError(t, err)
	_, bad, err = s.Counters.ReconcileCounters(ctx, b, 10)
	require.NoError(t, err)
	require.Equal(t, []exactlyonce.CounterMismatch{{Key: exactlyonce.CounterKey{EntityType: "t", UserID: "u"}, Sum: 3, Counted: 2}}, bad)
}

// Read entities are pruned after the retention, in bounded batches, and only they.
func TestPruneReadCounterEntities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	for i := range 5 {
		applyOne(t, s, cmsg(fmt.Sprint(i), "t", "u", "added"))
		if i < 3 {
			applyOne(t, s, cmsg(fmt.Sprint(i), "t", "u", "readed"))
		}
	}
	n, err := s.Counters.PruneReadCounterEntities(ctx, 2, 100)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is old enough yet")
	// Age every fact past the retention.
	_, err = s.DB.Pool().ExecContext(ctx, "UPDATE t_counter SET at = at - INTERVAL 16 DAY")
	require.NoError(t, err)
	n, err = s.Counters.PruneReadCounterEntities(ctx, 2, 100)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var facts int
	require.NoError(t, s.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM t_counter").Scan(&facts))
	require.Equal(t, 2, facts, "the two counted entities' added facts stay")
	_, bad, err := s.Counters.ReconcileCounters(ctx, []int64{counterstore.UserBucket("u")}, 10)
	require.NoError(t, err)
	require.Empty(t, bad)
}

// The benchmark's history, loaded directly, reads as if the consumer had stored it: its entities
// are counted, a repeated "added" is a duplicate, and the counts reconcile.
func TestLoadCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	require.NoError(t, mysqltest.LoadCounters(ctx, s.DB.Pool(), 1000, 10, []string{"a", "b"}, nil))
	v, err := s.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: "a", UserID: "seed-user-0"})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{Sum: 100, Version: 100}, v)
	r := applyOne(t, s, cmsg("seed-0", "a", "seed-user-0", "added"))
	require.False(t, r.Applied)
	r = applyOne(t, s, cmsg("seed-0", "a", "seed-user-0", "readed"))
	require.True(t, r.Applied)
	require.Equal(t, int64(99), r.Sum)
	all := make([]int64, counterstore.CounterBuckets)
	for i := range all {
		all[i] = int64(i)
	}
	checked, bad, err := s.Counters.ReconcileCounters(ctx, all, 100)
	require.NoError(t, err)
	require.Equal(t, 10, checked)
	require.Empty(t, bad)
}

// Every message the consumer accepts can be recorded with its notification: names of 255
// characters that JSON escapes to six bytes each ('<', '>' and '&' as \u003c, a control character
// of an entityId as \u0001; U+2028, escaped as \u2028 too, is no longer accepted in a name) make a notification of about 4,700 bytes, which
// did not fit the 4,096 bytes of counter_notifications.body: the batch failed on every delivery
// (Data too long), so the message and every message batched with it ended in the dead-letter
// queue, their counts lost. Migration 0032 widens the column; here the widest notification is
// recorded beside an ordinary message, and both are published (read back) whole.
func TestCounterWidestNotificationIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	wide := func(r string) string { return strings.Repeat(r, exactlyonce.MaxNameLength) }
	msgs := []exactlyonce.CounterMessage{
		cmsg("m1", "message", "alice", exactlyonce.CounterAdded),
		cmsg(wide("\x01"), wide("<"), wide("&"), exactlyonce.CounterRead),
		cmsg(wide("&"), wide(">"), wide("<"), exactlyonce.CounterAdded),
	}
	for _, m := range msgs {
		encoded, err := exactlyonce.DecodeCounterMessage(mustJSON(t, map[string]string{
			"entityId": m.EntityID, "entityType": m.EntityType, "userId": m.UserID, "action": m.Action}))
		require.NoError(t, err, "the consumer accepts the message")
		require.Equal(t, m, encoded)
	}
	results, err := s.Counters.ApplyCounterMessages(ctx, msgs)
	require.NoError(t, err)
	require.Len(t, results, 3)
	require.True(t, results[0].Applied)
	require.True(t, results[2].Applied)

	got, err := s.Counters.UnpublishedCounterResults(ctx, -time.Hour, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	longest := 0
	for _, r := range results {
		body := got[r.ID]
		longest = max(longest, len(body))
		var back exactlyonce.CounterResult
		require.NoError(t, json.Unmarshal(body, &back), "notification %s is JSON, whole", r.ID)
		require.Equal(t, r, back)
	}
	require.Greater(t, longest, 4096, "the widest notification is wider than the old column")
	v, err := s.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: wide(">"), UserID: wide("<")})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{Sum: 1, Version: 1}, v)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// The reconciliation reads the facts of its sample once, not once per count: a count's facts are
// found only by scanning the subpartition of t_counter that holds its user's bucket (one of 8 per
// kind, migration 0008), so reading them count by count scanned that subpartition twice per count,
// 100 times for a sweep's 50 counts: 12.5 times the whole fact table, every sweep. 40 counts of
// one user beside 4,000 facts of other buckets in the same subpartition: the rows the server reads
// stay within a few scans of that subpartition (before: about 320,000), and every count checks.
func TestReconcileReadsTheFactsOfItsSampleOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 2)
	db, _ := mysqltest.TalliedDB(t, dsn, 1, "") // one connection: the session's counters are the store's
	s, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	const types = 40
	var ms []exactlyonce.CounterMessage
	for i := range types {
		typ := fmt.Sprintf("dialog-%02d", i)
		ms = append(ms, cmsg("a", typ, "u", "added"), cmsg("b", typ, "u", "added"), cmsg("a", typ, "u", "readed"))
	}
	_, err = s.Counters.ApplyCounterMessages(ctx, ms)
	require.NoError(t, err)
	b := counterstore.UserBucket("u")
	const others = 4000
	var rows []string
	var args []any
	for i := range others {
		rows = append(rows, "(?, 1, ?, 't', 'other', ?, NOW(6))")
		args = append(args, (b+8*int64(1+i%1000))%counterstore.CounterBuckets, fmt.Sprintf("%032d", i), fmt.Sprint(i))
	}
	_, err = db.ExecContext(ctx, "INSERT INTO t_counter (bucket, kind, entity_hash, entity_type, user_id, entity_id, at) VALUES "+
		strings.Join(rows, ", "), args...)
	require.NoError(t, err)

	scanned := func() int64 {
		var name string
		var n int64
		require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'").Scan(&name, &n))
		return n
	}
	before := scanned()
	checked, bad, err := s.Counters.ReconcileCounters(ctx, []int64{b}, 50)
	read := scanned() - before
	require.NoError(t, err)
	require.Equal(t, types, checked)
	require.Empty(t, bad)
	facts := int64(others + 3*types)
	require.Less(t, read, 4*facts, "rows read by the reconciliation of %d counts beside %d facts", types, facts)
	t.Logf("the reconciliation of %d counts read %d rows (%d facts in the subpartitions)", types, read, facts)
}

// The sweeper's sample is of one subpartition of the facts while it fits in one, so that its
// reconciliation reads an eighth of them; a sample of every bucket has every bucket once.
func TestRandomCounterBucketsShareASubpartition(t *testing.T) {
	t.Parallel()
	var s *counterstore.Store // the sample reads nothing
	for range 20 {
		b := s.RandomCounterBuckets(4)
		require.Len(t, b, 4)
		for _, x := range b {
			require.Equal(t, b[0]%counterstore.CounterFactSubpartitions, x%counterstore.CounterFactSubpartitions, "%v", b)
		}
	}
	all := s.RandomCounterBuckets(counterstore.CounterBuckets)
	seen := map[int64]bool{}
	for _, x := range all {
		require.False(t, seen[x], "bucket %d twice", x)
		require.True(t, x >= 0 && x < counterstore.CounterBuckets)
		seen[x] = true
	}
	require.Len(t, seen, counterstore.CounterBuckets)
	require.Empty(t, s.RandomCounterBuckets(-1))
}

// The pruning of read entities takes one subpartition of t_counter a call: the delete finds an
// entity's facts only by scanning the subpartitions of its bucket, so a batch of entities of every
// subpartition (what a sweep finds when few are old, a sweep's trickle spread by the hash) scanned
// the whole fact table, every counted entity's facts included. 40 entities read long ago, in every
// subpartition, beside 16,000 counted facts: each call reads at most about an eighth of the table
// (before: the whole table, 16,144 rows, in the first call), and 8 calls prune every one of them.
func TestPruneReadsASubpartitionACall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 2)
	db, _ := mysqltest.TalliedDB(t, dsn, 1, "") // one connection: the session's counters are the store's
	s, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	const read, counted = 40, 16000
	var ms []exactlyonce.CounterMessage
	subs := map[int64]bool{}
	for i := range read {
		user := fmt.Sprint("user-", i)
		subs[counterstore.UserBucket(user)%counterstore.CounterFactSubpartitions] = true
		ms = append(ms, cmsg(fmt.Sprint("r", i), "t", user, "added"), cmsg(fmt.Sprint("r", i), "t", user, "readed"))
	}
	require.Len(t, subs, counterstore.CounterFactSubpartitions, "the read entities are in every subpartition")
	_, err = s.Counters.ApplyCounterMessages(ctx, ms)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE t_counter SET at = at - INTERVAL 16 DAY")
	require.NoError(t, err)
	var rows []string
	var args []any
	for i := range counted {
		rows = append(rows, "(?, 1, ?, 't', 'other', ?, NOW(6))")
		args = append(args, int64(i%counterstore.CounterBuckets), fmt.Sprintf("%032d", i), fmt.Sprint(i))
	}
	_, err = db.ExecContext(ctx, "INSERT INTO t_counter (bucket, kind, entity_hash, entity_type, user_id, entity_id, at) VALUES "+
		strings.Join(rows, ", "), args...)
	require.NoError(t, err)

	scanned := func() int64 {
		var name string
		var n int64
		require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'").Scan(&name, &n))
		return n
	}
	table := int64(counted + 2*read)
	pruned := 0
	for call := range counterstore.CounterFactSubpartitions {
		before := scanned()
		n, err := s.Counters.PruneReadCounterEntities(ctx, 500, 5000)
		got := scanned() - before
		require.NoError(t, err)
		pruned += n
		require.Less(t, got, table/4, "rows read by prune call %d beside %d facts", call, table)
	}
	require.Equal(t, read, pruned)
	var facts int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t_counter").Scan(&facts))
	require.Equal(t, counted, facts, "the read entities' facts are gone, the counted ones' stay")
}

// An entity read more than 15 days ago is forgotten (its directory entry expires) and its facts
// are pruned by a later sweep: an "added" between the two counts it again, and until the prune
// the entity has an old added fact, an old read fact and a new added fact. The reconciliation
// reads the facts as the prune will leave them, so that this is no mismatch (before: the entity
// counted 0 against a sum of 1 and had an added fact twice, an error line and an alarm for
// nothing); the same facts without the old read fact still are one.
func TestReconcileReadsAForgottenEntityAsThePruneWillLeaveIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	m := cmsg("e", "t", "u", "added")
	h := m.EntityHash()
	b := counterstore.UserBucket("u")
	fact := func(kind int, age string) {
		t.Helper()
		_, err := s.DB.Pool().ExecContext(ctx, "INSERT INTO t_counter (bucket, kind, entity_hash, entity_type, user_id, entity_id, at) "+
			"VALUES (?, ?, ?, 't', 'u', 'e', NOW(6) - INTERVAL "+age+")", b, kind, h[:])
		require.NoError(t, err)
	}
	fact(1, "17 DAY")
	fact(2, "16 DAY")
	r := applyOne(t, s, m) // its directory never had it here: counted again, as after the expiry
	require.True(t, r.Applied)
	_, bad, err := s.Counters.ReconcileCounters(ctx, []int64{b}, 10)
	require.NoError(t, err)
	require.Empty(t, bad, "an entity forgotten and added again")

	n, err := s.Counters.PruneReadCounterEntities(ctx, 500, 5000)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, bad, err = s.Counters.ReconcileCounters(ctx, []int64{b}, 10)
	require.NoError(t, err)
	require.Empty(t, bad, "after the prune")

	fact(1, "16 DAY") // an added fact twice with no read fact: a real mismatch
	_, bad, err = s.Counters.ReconcileCounters(ctx, []int64{b}, 10)
	require.NoError(t, err)
	require.Len(t, bad, 1)
}
