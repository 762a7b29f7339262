package counters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func body(m exactlyonce.CounterMessage) string {
	action := m.Action
	b, _ := json.Marshal(map[string]string{"entityId": m.EntityID, "entityType": m.EntityType, "userId": m.UserID, "action": action})
	return string(b)
}

// sendAll sends bodies to url, ten per call, from a few senders at once.
func sendAll(t *testing.T, client *sqs.Client, url string, bodies []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	chunks := make(chan []string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range chunks {
				var entries []types.SendMessageBatchRequestEntry
				for i, b := range c {
					entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b)})
				}
				out, err := client.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("%d messages not sent", len(out.Failed))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < len(bodies); i += 10 {
		chunks <- bodies[i:min(i+10, len(bodies))]
	}
	close(chunks)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// drain receives and deletes every message of url until the queue has stayed empty for a while
// after `until` says it is done.
func drain(t *testing.T, client *sqs.Client, url string, want int, timeout time.Duration) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	deadline := time.Now().Add(timeout)
	for len(out) < want && time.Now().Before(deadline) {
		r, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		var del []types.DeleteMessageBatchRequestEntry
		for i, m := range r.Messages {
			out = append(out, aws.ToString(m.Body))
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if len(del) > 0 {
			_, err = client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del})
			require.NoError(t, err)
		}
	}
	return out
}

// The test: 10,000 messages over 100 users and 3 entity types, each sent 1 to 3 times,
// shuffled, with "readed" for half of the entities, consumed by 8 concurrent consumers: every sum
// equals the count computed from the distinct messages, every version the number of applied
// changes, and every message has a notification.
func TestTenThousandMessagesFromEightConsumers(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 messages")
	}
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	client := localsqs.Client(t)
	in := localsqs.Queues(t, client, 30, 5)
	results := localsqs.Queues(t, client, 30, 5)

	// The distinct messages, then each sent 1 to 3 times.
	type key = exactlyonce.CounterKey
	var bodies []string
	types := []string{"message", "dialog", "mention"}
	for e := 0; len(bodies) < 10_000; e++ {
		m := exactlyonce.CounterMessage{EntityID: fmt.Sprintf("e%d", e), EntityType: types[e%3], UserID: fmt.Sprintf("user-%d", e%100), Action: "added"}
		distinct := []exactlyonce.CounterMessage{m}
		if e%2 == 0 {
			r := m
			r.Action = "readed"
			distinct = append(distinct, r)
		}
		for _, d := range distinct {
			for range 1 + rand.IntN(3) {
				bodies = append(bodies, body(d))
			}
		}
	}
	// What the messages sent must count: the entities added and never read.
	bodies = bodies[:10_000]
	sent := map[string]int{} // body -> times sent
	want := map[key]int64{}
	hasRead := map[string]bool{}
	for _, b := range bodies {
		sent[b]++
		m, err := exactlyonce.DecodeCounterMessage(b)
		require.NoError(t, err)
		if m.Action == exactlyonce.CounterRead {
			hasRead[m.EntityType+"\x00"+m.UserID+"\x00"+m.EntityID] = true
		}
	}
	counted := map[string]bool{}
	for _, b := range bodies {
		m, _ := exactlyonce.DecodeCounterMessage(b)
		id := m.EntityType + "\x00" + m.UserID + "\x00" + m.EntityID
		if m.Action == exactlyonce.CounterAdded && !hasRead[id] && !counted[id] {
			counted[id] = true
			want[m.Key()]++
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	sendAll(t, client, in.URL, bodies)

	c := &counters.Consumer{Store: store.Counters, Publisher: &counters.SQSPublisher{Client: client, QueueURL: results.URL}}
	m := mapping.New(client, c.Handle, mapping.Config{QueueURL: in.URL, QueueARN: in.ARN, Concurrency: 8, BatchSize: 10})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	testutil.Eventually(t, 3*time.Minute, "every message consumed", func() bool {
		_, _, deleted, _, _ := m.Stats.Snapshot()
		return deleted >= int64(len(bodies))
	})
	stop()
	<-done
	_, received, deleted, failed, errored := m.Stats.Snapshot()
	t.Logf("received %d, deleted %d, failed %d, errored batches %d, store %+v", received, deleted, failed, errored, store.DB.Stats())

	notes := drain(t, client, results.URL, len(bodies), time.Minute)
	byID := map[string]exactlyonce.CounterResult{}
	for _, n := range notes {
		var r exactlyonce.CounterResult
		require.NoError(t, json.Unmarshal([]byte(n), &r))
		byID[r.ID] = r
	}
	// Every message has a notification (a message delivered twice, after a lost commit reply, has
	// two), and a key's applied notifications are its changes: as many as its version, with
	// versions 1, 2, ... each once.
	heard := map[string]int{}
	applied := map[key][]int64{}
	for _, r := range byID {
		heard[body(exactlyonce.CounterMessage{EntityID: r.EntityID, EntityType: r.EntityType, UserID: r.UserID, Action: r.Action})]++
		if r.Applied {
			k := key{EntityType: r.EntityType, UserID: r.UserID}
			applied[k] = append(applied[k], r.Version)
		}
	}
	for b, n := range sent {
		require.GreaterOrEqual(t, heard[b], n, "notifications of %s", b)
	}
	// A key has a row once a change was applied to it. A key whose every entity was read before
	// it was added (about one run in sixteen has one) never changed: no row, no notification
	// applied, and nothing wanted.
	keys := 0
	for u := range 100 {
		sums, err := store.Counters.CounterSums(ctx, fmt.Sprintf("user-%d", u))
		require.NoError(t, err)
		for _, typ := range types {
			k := key{EntityType: typ, UserID: fmt.Sprintf("user-%d", u)}
			if _, ok := sums[typ]; !ok {
				require.Zero(t, want[k], "sum of %v has no row", k)
				require.Empty(t, applied[k], "applied notifications of %v, which has no row", k)
			}
		}
		for typ, v := range sums {
			k := key{EntityType: typ, UserID: fmt.Sprintf("user-%d", u)}
			require.Equal(t, want[k], v.Sum, "sum of %v", k)
			require.Len(t, applied[k], int(v.Version), "applied notifications of %v", k)
			seen := map[int64]bool{}
			for _, ver := range applied[k] {
				require.False(t, seen[ver], "version %d of %v twice", ver, k)
				seen[ver] = true
				require.True(t, ver >= 1 && ver <= v.Version)
			}
			keys++
		}
	}
	for k, n := range want {
		v, err := store.Counters.CounterSum(ctx, k)
		require.NoError(t, err)
		require.Equal(t, n, v.Sum, "sum of %v", k)
	}
	require.GreaterOrEqual(t, keys, 290, "keys with a row, of 300")
	require.LessOrEqual(t, keys, 300, "keys with a row, of 300")
	all := make([]int64, counterstore.CounterBuckets)
	for i := range all {
		all[i] = int64(i)
	}
	checked, bad, err := store.Counters.ReconcileCounters(ctx, all, 1000)
	require.NoError(t, err)
	require.Equal(t, keys, checked)
	require.Empty(t, bad)
}

// Poison messages end in the DLQ after the receive limit; the messages around them are counted,
// and answered.
func TestPoisonMessagesEndInTheDLQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	client := localsqs.Client(t)
	in := localsqs.Queues(t, client, 1, 2) // 1 s visibility, DLQ after 2 receives: a short test
	results := localsqs.Queues(t, client, 30, 5)
	poison := []string{
		`not json`,
		`{"entityId":"x","entityType":"t","userId":"u","action":"deleted"}`,
		`{"entityId":"","entityType":"t","userId":"u","action":"added"}`,
		`{"entityId":"` + strings.Repeat("é", 256) + `","entityType":"t","userId":"u","action":"added"}`,
		`{"entityId":"x","entityType":"t","userId":"u"}`,
		`{"entityId":"x","entityType":"t","userId":"u","action":"added","extra":1}`,
		`{"entityId":"x","entityId":"y","entityType":"t","userId":"u","action":"added"}`,
		`{"entityId":1,"entityType":"t","userId":"u","action":"added"}`,
	}
	var bodies []string
	for i := range 20 {
		bodies = append(bodies, body(exactlyonce.CounterMessage{EntityID: fmt.Sprint(i), EntityType: "t", UserID: "u", Action: "added"}))
	}
	bodies = append(bodies, `{"entityId":"`+strings.Repeat("é", 255)+`","entityType":"t","userId":"u","action":"read"}`)
	all := append(append([]string{}, bodies...), poison...)
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	sendAll(t, client, in.URL, all)

	c := &counters.Consumer{Store: store.Counters, Publisher: &counters.SQSPublisher{Client: client, QueueURL: results.URL}}
	m := mapping.New(client, c.Handle, mapping.Config{QueueURL: in.URL, QueueARN: in.ARN, Concurrency: 2, BatchSize: 10})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	dead := drain(t, client, in.DLQURL, len(poison), time.Minute)
	stop()
	<-done
	require.ElementsMatch(t, poison, dead)
	v, err := store.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: "t", UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{Sum: 20, Version: 20}, v)
	notes := drain(t, client, results.URL, len(bodies), 30*time.Second)
	require.Len(t, notes, len(bodies))
	var unpublished int
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM counter_notifications WHERE state = 0").Scan(&unpublished))
	require.Zero(t, unpublished, "the consumer marks what it published")
}

// A commit whose reply was lost, or a message the queue delivers twice: the second delivery is a
// duplicate, answered with applied false and the current sum, and counts nothing.
func TestRedeliveredBatchCountsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	var got [][]exactlyonce.CounterResult
	rec := metrics.NewRecorder(metrics.PartCounter, true, nil)
	c := &counters.Consumer{Store: store.Counters, Applied: func(rs []exactlyonce.CounterResult) { got = append(got, rs) }, Metrics: rec}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "1", Body: `{"entityId":"a","entityType":"t","userId":"u","action":"added"}`},
		{MessageId: "2", Body: `{"entityId":"b","entityType":"t","userId":"u","action":"added"}`},
		{MessageId: "3", Body: `{"entityId":"b","entityType":"t","userId":"u","action":"bogus"}`},
	}}
	for i := range 2 {
		resp, err := c.Handle(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "3"}}, resp.BatchItemFailures)
		// The invocation's metrics: two applied the first time, two duplicates the second, the bad
		// one rejected each time.
		values := map[string]float64{}
		for _, v := range rec.Values() {
			values[v.Name] = v.Value
		}
		require.Equal(t, map[bool]float64{true: 2, false: 0}[i == 0], values["CounterApplied"], "delivery %d", i)
		require.Equal(t, map[bool]float64{true: 0, false: 2}[i == 0], values["CounterDuplicates"], "delivery %d", i)
		require.Equal(t, 1.0, values["CounterRejected"], "delivery %d", i)
	}
	require.Len(t, got, 2)
	require.True(t, got[0][0].Applied && got[0][1].Applied)
	require.False(t, got[1][0].Applied || got[1][1].Applied)
	require.Equal(t, int64(2), got[1][1].Sum)
	require.Equal(t, int64(2), got[1][1].Version)
}
