package e2e

// The failure scenarios of the design, each against the real MariaDB and the real SQS protocol,
// each named after what fails and asserting the invariant it promises. docs/guarantees.md lists them.

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

func fixedValue(id int64) string { return fmt.Sprintf("v%d", id) }

// Invariant: a processor process killed after claiming an event (inside its transaction) and before
// acknowledging loses nothing: the database rolls the claim back when the connection drops, the
// message reappears after the visibility timeout, and the event ends processed exactly once: by the
// processor that took over, whose report is the only one (the killed one reported its claim
// starting, and nothing settled).
func TestProcessorKilledAfterClaimingBeforeAcknowledging(t *testing.T) {
	t.Parallel()
	db, dsn := testdb.DB(t, 4)
	r := newRig(t, rigOptions{visibility: 2, maxReceive: 5, db: db})
	id := r.pending(1)[0]
	msgID := r.send(queue.Encode(id))[0]

	proc, _ := r.child("processor", "DB_DSN="+dsn, "QUEUE_URL="+r.q.URL,
		"AWS_ENDPOINT_URL_SQS="+localsqs.Endpoint(t), "CHILD_HANG=claimed")
	_, err := proc.WaitLine("received "+msgID, 30*time.Second)
	require.NoError(t, err)
	_, err = proc.WaitLine(fmt.Sprintf("claimed %d", id), 30*time.Second)
	require.NoError(t, err)
	// The child holds the claim: no other worker can take the event now.
	out, err := r.engine(exactlyonce.BySweeper).ProcessIDs(context.Background(), []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeBusy, out[id], "the killed process held the row lock")

	proc.Kill()
	r.run(1, 10)
	testutil.Eventually(t, 30*time.Second, "the message reappeared and was acknowledged", func() bool {
		return r.rec.get(r.rec.acks, msgID) == 1 && queueEmpty(t, r.client, r.q.URL)
	})
	r.settledOnce([]int64{id}, exactlyonce.ByProcessor)
	require.True(t, queueEmpty(t, r.client, r.q.DLQURL))
	r.rec.requireNoViolations(t)
}

// Invariant: a processor killed after it committed and before the mapping acknowledged (deleted)
// the message: the message reappears, is acknowledged as already processed, and the event stays
// settled once, by the killed processor's claim; the processor that acknowledges the message again
// settles nothing. Killed after its report was written, the killed processor's report is the
// event's one report. Killed between the commit and the report (its answer is what a worker whose
// commit's answer was lost knows, too), the event is settled by a claim that was reported starting
// and whose settlement nobody reported: the checker counts it as unreported, exactly once, and
// finds no other report of it.
func TestProcessorKilledAfterCommittingBeforeAcknowledging(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"handled", "committed"} {
		name := map[string]string{"handled": "after reporting", "committed": "before reporting"}[mode]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, dsn := testdb.DB(t, 4)
			r := newRig(t, rigOptions{visibility: 2, maxReceive: 5, db: db})
			id := r.pending(1)[0]
			msgID := r.send(queue.Encode(id))[0]

			proc, reports := r.child("processor", "DB_DSN="+dsn, "QUEUE_URL="+r.q.URL,
				"AWS_ENDPOINT_URL_SQS="+localsqs.Endpoint(t), "CHILD_HANG="+mode)
			if mode == "handled" {
				_, err := proc.WaitLine("handled failures=0", 30*time.Second)
				require.NoError(t, err)
				// The child hangs for good, its reports written: they alone account for the event.
				alive := verify.NewLedger()
				require.NoError(t, alive.ReadFile(reports))
				_, res := checkSettled(t, r.checkStore, alive, []int64{id}, exactlyonce.ByProcessor)
				require.Equal(t, 1, res.Reported, res.String())
			} else {
				_, err := proc.WaitLine(fmt.Sprintf("committed %d", id), 30*time.Second)
				require.NoError(t, err)
			}
			proc.Kill()

			r.run(1, 10)
			testutil.Eventually(t, 30*time.Second, "the redelivered message was acknowledged", func() bool {
				return r.rec.get(r.rec.acks, msgID) == 1 && queueEmpty(t, r.client, r.q.URL)
			})
			if mode == "handled" {
				r.settledOnce([]int64{id}, exactlyonce.ByProcessor)
			} else {
				_, res := r.checkSettled([]int64{id}, exactlyonce.ByProcessor)
				require.Equal(t, 1, res.Unreported, "the killed processor committed and never reported: %s", res)
				require.Zero(t, res.Reported, "and nobody else reported settling the event: %s", res)
			}
			r.rec.requireNoViolations(t)
		})
	}
}

// Invariant: the same message delivered twice (SQS is at-least-once) has one effect, and both
// deliveries are acknowledged.
func TestSameMessageDeliveredTwice(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{visibility: 1, maxReceive: 5})
	id := r.pending(1)[0]
	r.send(queue.Encode(id))
	ctx := context.Background()
	receive := func() events.SQSMessage {
		var got events.SQSMessage
		testutil.Eventually(t, 20*time.Second, "the message is delivered", func() bool {
			out, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.q.URL), MaxNumberOfMessages: 1})
			require.NoError(t, err)
			if len(out.Messages) == 0 {
				return false
			}
			m := out.Messages[0]
			got = events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
				Body: aws.ToString(m.Body), EventSource: "aws:sqs", EventSourceARN: r.q.ARN}
			return true
		})
		return got
	}
	first := receive()
	second := receive() // the visibility timeout passed without a delete: SQS delivers it again
	require.Equal(t, first.MessageId, second.MessageId)
	require.NotEqual(t, first.ReceiptHandle, second.ReceiptHandle)

	for _, d := range []events.SQSMessage{first, second} {
		resp, err := r.proc.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{d}})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures, "both deliveries are acknowledged")
	}
	r.settledOnce([]int64{id}, exactlyonce.ByProcessor)
}

// Invariant: many deliveries naming one event, handled concurrently (duplicate messages, and the
// same message handed to concurrent invocations), have one effect; every message ends
// acknowledged, none in the DLQ.
func TestSameEventDeliveredConcurrently(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{visibility: 1, maxReceive: 5})
	ctx := context.Background()

	// Eight invocations with the same record at the same instant.
	id := r.pending(1)[0]
	rec := events.SQSMessage{MessageId: "m-1", Body: queue.Encode(id), EventSource: "aws:sqs"}
	var wg sync.WaitGroup
	start := make(chan struct{})
	var acked, busy atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := r.proc.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{rec}})
			if err == nil && len(resp.BatchItemFailures) == 0 {
				acked.Add(1)
			} else {
				busy.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Positive(t, acked.Load())
	r.settledOnce([]int64{id}, exactlyonce.ByProcessor)
	// Those that found the event held came back (as SQS would redeliver them) and are acknowledged.
	for range busy.Load() {
		resp, err := r.proc.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{rec}})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
	}

	// Ten messages naming one event, through the queue, to four concurrent pollers.
	id2 := r.pending(1)[0]
	var bodies []string
	for range 10 {
		bodies = append(bodies, queue.Encode(id2))
	}
	msgIDs := r.send(bodies...)
	r.run(4, 1)
	testutil.Eventually(t, 30*time.Second, "every duplicate is acknowledged", func() bool {
		for _, m := range msgIDs {
			if r.rec.get(r.rec.acks, m) == 0 {
				return false
			}
		}
		return queueEmpty(t, r.client, r.q.URL)
	})
	r.settledOnce([]int64{id, id2}, exactlyonce.ByProcessor)
	require.True(t, queueEmpty(t, r.client, r.q.DLQURL))
	r.rec.requireNoViolations(t)
}

// Invariant: a processor and a sweeper racing for the same event give it one effect, whichever
// holds it first; the loser skips it (SKIP LOCKED) and never waits for or overwrites the winner.
func TestProcessorAndSweeperRaceForTheSameEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("processor first", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, rigOptions{visibility: 30, maxReceive: 5})
		id := r.pending(1)[0]
		inTx, release := make(chan struct{}), make(chan struct{})
		r.proc.Engine.Works = valueWork(func(int64) string { close(inTx); <-release; return "by-processor" })
		done := make(chan events.SQSEventResponse)
		go func() {
			resp, _ := r.proc.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: queue.Encode(id)}}})
			done <- resp
		}()
		<-inTx
		res, err := r.sweeper(sweeping.Config{Grace: new(time.Duration(0))}).Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Processed, "the sweeper skips the event the processor holds")
		close(release)
		require.Empty(t, (<-done).BatchItemFailures)
		res, err = r.sweeper(sweeping.Config{Grace: new(time.Duration(0))}).Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Processed)
		r.settledOnce([]int64{id}, exactlyonce.ByProcessor)
	})

	t.Run("sweeper first", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, rigOptions{visibility: 30, maxReceive: 5})
		id := r.pending(1)[0]
		inTx, release := make(chan struct{}), make(chan struct{})
		s := r.sweeper(sweeping.Config{Grace: new(time.Duration(0)),
			Engine: processing.Engine{Works: valueWork(func(int64) string { close(inTx); <-release; return "by-sweeper" })}})
		done := make(chan error)
		go func() { _, err := s.Sweep(ctx); done <- err }()
		<-inTx
		msg := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: queue.Encode(id)}}}
		resp, err := r.proc.Handle(ctx, msg)
		require.NoError(t, err)
		require.Len(t, resp.BatchItemFailures, 1, "the processor reports the held event's message as failed, to come back")
		close(release)
		require.NoError(t, <-done)
		resp, err = r.proc.Handle(ctx, msg)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures, "the message that came back is acknowledged")
		r.settledOnce([]int64{id}, exactlyonce.BySweeper)
	})

	t.Run("many at once", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, rigOptions{visibility: 1, maxReceive: 10})
		ids := r.pending(300)
		var bodies []string
		for _, id := range ids {
			bodies = append(bodies, queue.Encode(id))
		}
		r.send(bodies...)
		r.run(3, 10)
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := r.sweeper(sweeping.Config{Grace: new(time.Duration(0))}).Agent(agents.Config{BatchSize: 7,
					Member:       agents.MemberConfig{PulseInterval: 50 * time.Millisecond, Expiration: time.Second},
					PollInterval: 10 * time.Millisecond, PollJitter: 10 * time.Millisecond}, exactlyonce.BySweeper)
				if err != nil {
					t.Error(err)
					return
				}
				_ = a.Run(sctx)
			}()
		}
		t.Cleanup(func() { cancel(); wg.Wait() })
		testutil.Eventually(t, 60*time.Second, "every event processed and every message acknowledged", func() bool {
			return allSettled(t, r.store, ids) && queueEmpty(t, r.client, r.q.URL)
		})
		perPath := r.settledOnce(ids, exactlyonce.ByProcessor, exactlyonce.BySweeper)
		t.Logf("processed by path: %v", perPath)
		require.True(t, queueEmpty(t, r.client, r.q.DLQURL))
		r.rec.requireNoViolations(t)
	})
}

// Invariant: a malformed or corrupted message is reported as failed on every delivery, moves to
// the DLQ after the receive limit, and never holds up the other messages: each good message of
// the same batches is delivered once and acknowledged.
func TestMalformedMessagesFailEveryTimeAndEndInTheDLQ(t *testing.T) {
	t.Parallel()
	const maxReceive = 3
	// 2 s of visibility: a good message is handled and deleted long before it could come back.
	r := newRig(t, rigOptions{visibility: 2, maxReceive: maxReceive})
	poison := []string{
		"not json: a corrupted message",
		`{"id":12`,                    // truncated
		`{"id":-7}`,                   // negative
		`{"id":0}`,                    // zero
		`{"id":"5"}`,                  // a string
		`{"id":99999999999999999999}`, // overflows int64
		`{"id":1,"extra":"; DROP TABLE events; --"}`,
		`{"id":987654321}`, // names no event
		"\u00ff\u00fe binary-looking",
	}
	good := r.pending(20)
	var bodies []string
	for i, id := range good {
		bodies = append(bodies, queue.Encode(id))
		if i < len(poison) {
			bodies = append(bodies, poison[i]) // interleaved: poison shares batches with good messages
		}
	}
	msgIDs := r.send(bodies...)
	r.run(2, 10)

	testutil.Eventually(t, 60*time.Second, "every poison message is in the DLQ", func() bool {
		v, _, err := queue.Depth(context.Background(), r.client, r.q.DLQURL)
		require.NoError(t, err)
		return v == len(poison) && queueEmpty(t, r.client, r.q.URL)
	})
	r.settledOnce(good, exactlyonce.ByProcessor)
	isPoison := map[string]bool{}
	for _, p := range poison {
		isPoison[p] = true
	}
	for _, m := range msgIDs {
		body := r.rec.body(m)
		if isPoison[body] {
			require.Equal(t, maxReceive, r.rec.get(r.rec.deliveries, m), "poison %q delivered up to the receive limit", body)
			require.Equal(t, maxReceive, r.rec.get(r.rec.failures, m), "poison %q reported failed on every delivery", body)
			require.Zero(t, r.rec.get(r.rec.acks, m))
		} else {
			require.Equal(t, 1, r.rec.get(r.rec.deliveries, m), "good message %q delivered once: never held up", body)
			require.Equal(t, 1, r.rec.get(r.rec.acks, m))
		}
	}
	dlq := drain(t, r.client, r.q.DLQURL)
	sort.Strings(dlq)
	want := append([]string(nil), poison...)
	sort.Strings(want)
	require.Equal(t, want, dlq, "the DLQ holds exactly the poison messages")
	r.rec.requireNoViolations(t)
}

// Invariant: the database becoming unavailable during processing (the server stopped or killed
// with a transaction open, and down for a while) acknowledges nothing that was not committed;
// processing resumes when it returns; nothing is lost and nothing processed twice.
func TestDatabaseServerDownDuringProcessing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"stopped", "killed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := fault.PrivateServer(t)
			ctx := context.Background()
			require.NoError(t, srv.CreateDatabase(ctx, "events"))
			db, err := mysql.Open(mysql.ConnConfig{DSN: srv.DSN("events"), MaxOpenConns: 8})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			require.NoError(t, mysql.Migrate(ctx, db))
			check, err := sql.Open("mysql", srv.DSN("events"))
			require.NoError(t, err)
			t.Cleanup(func() { check.Close() })

			r := newRig(t, rigOptions{visibility: 1, maxReceive: 30, db: db, check: check})
			var up atomic.Bool
			up.Store(true)
			r.rec.ackGate = up.Load
			inTx, release := make(chan struct{}, 1), make(chan struct{})
			var hold atomic.Bool
			r.proc.Engine.Works = valueWork(func(id int64) string {
				if hold.Load() {
					select {
					case inTx <- struct{}{}:
					default:
					}
					<-release
				}
				return fixedValue(id)
			})
			enqueue := func(ids []int64) {
				var bodies []string
				for _, id := range ids {
					bodies = append(bodies, queue.Encode(id))
				}
				r.send(bodies...)
			}
			before := r.pending(20)
			during := r.pending(20)
			enqueue(before)
			r.run(2, 10)
			testutil.Eventually(t, 30*time.Second, "the first events are processed and acknowledged", func() bool {
				_, _, acks := r.rec.totals()
				return acks == len(before)
			})

			// A batch claims its events and is still working when the database goes away.
			hold.Store(true)
			enqueue(during)
			select {
			case <-inTx:
			case <-time.After(30 * time.Second):
				t.Fatal("no batch started")
			}
			up.Store(false)
			if mode == "stopped" {
				require.NoError(t, srv.Stop())
			} else {
				require.NoError(t, srv.Kill())
			}
			close(release)
			_, failedBefore, _ := r.rec.totals()
			testutil.Eventually(t, 30*time.Second, "deliveries keep failing while the database is down", func() bool {
				_, failed, _ := r.rec.totals()
				return failed >= failedBefore+len(during)+4
			})
			_, _, acksWhileDown := r.rec.totals()
			require.Equal(t, len(before), acksWhileDown, "nothing acknowledged while the database was down")

			up.Store(true) // before Start: nothing can commit until the server is back
			require.NoError(t, srv.Start(), srv.ErrorLog())
			testutil.Eventually(t, 60*time.Second, "processing resumed and drained the queue", func() bool {
				_, _, acks := r.rec.totals()
				return acks >= len(before)+len(during) && queueEmpty(t, r.client, r.q.URL)
			})
			r.settledOnce(append(before, during...), exactlyonce.ByProcessor)
			audit, err := mysqltest.AuditEvents(ctx, r.checkStore.DB.Pool())
			require.NoError(t, err)
			require.Len(t, audit, len(before)+len(during), "nothing lost, nothing extra")
			require.True(t, queueEmpty(t, r.client, r.q.DLQURL))
			r.rec.requireNoViolations(t)
		})
	}
}

// Invariant: connections cut under the processor (mid-transaction, at the commit's reply, or
// refused for a while) acknowledge nothing that was not committed, and every event ends processed
// exactly once.
func TestDatabaseConnectionsCutDuringProcessing(t *testing.T) {
	t.Parallel()
	proxied := func(t *testing.T) (*rig, *fault.Proxy) {
		direct, dsn := testdb.DB(t, 4)
		server, err := drv.ParseDSN(testdb.ServerDSN())
		require.NoError(t, err)
		proxy := fault.StartProxy(t, server.Addr)
		db, err := mysql.Open(mysql.ConnConfig{DSN: proxy.DSN(dsn), MaxOpenConns: 4})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		r := newRig(t, rigOptions{visibility: 1, maxReceive: 20, db: db, check: direct})
		return r, proxy
	}

	t.Run("mid-transaction", func(t *testing.T) {
		t.Parallel()
		r, proxy := proxied(t)
		ids := r.pending(5)
		var cut atomic.Bool
		r.proc.Engine.Works = valueWork(func(id int64) string {
			if cut.CompareAndSwap(false, true) {
				proxy.CutAll() // the claim's transaction is open on the connection being cut
			}
			return fixedValue(id)
		})
		for _, id := range ids {
			r.send(queue.Encode(id))
		}
		r.run(1, 10)
		testutil.Eventually(t, 30*time.Second, "every event processed after the cut", func() bool {
			_, _, acks := r.rec.totals()
			return acks == len(ids) && queueEmpty(t, r.client, r.q.URL)
		})
		_, failures, _ := r.rec.totals()
		require.Positive(t, proxy.Cut.Load(), "a connection was cut")
		require.Positive(t, failures, "the batch on the cut connection was reported failed")
		r.settledOnce(ids, exactlyonce.ByProcessor)
		r.rec.requireNoViolations(t)
	})

	t.Run("commit reply lost", func(t *testing.T) {
		t.Parallel()
		r, proxy := proxied(t)
		id := r.pending(1)[0]
		proxy.LoseCommitReplies(1)
		msgID := r.send(queue.Encode(id))[0]
		r.run(1, 1)
		testutil.Eventually(t, 30*time.Second, "the message is acknowledged", func() bool {
			return r.rec.get(r.rec.acks, msgID) >= 1
		})
		require.EqualValues(t, 1, proxy.LostCommitReplies.Load(), "the server committed and the reply was lost")
		require.Equal(t, 1, r.rec.get(r.rec.failures, msgID), "the processor could not know it committed: it failed the message (once)")
		require.GreaterOrEqual(t, r.rec.get(r.rec.deliveries, msgID), 2, "the message came back and found the event processed")
		// The processor whose commit's answer was lost reported its claim starting and, believing
		// nothing committed, no settlement; the delivery that came back found the event settled and
		// settled nothing. The table names the first claim: unreported, once, and nobody else's.
		_, res := r.checkSettled([]int64{id}, exactlyonce.ByProcessor)
		require.Equal(t, 1, res.Unreported, "the settlement whose commit's answer was lost: %s", res)
		require.Zero(t, res.Reported, res.String())
		r.rec.requireNoViolations(t)
	})

	t.Run("refused for a while", func(t *testing.T) {
		t.Parallel()
		r, proxy := proxied(t)
		ids := r.pending(5)
		proxy.SetRefusing(true)
		proxy.CutAll()
		for _, id := range ids {
			r.send(queue.Encode(id))
		}
		r.run(2, 10)
		testutil.Eventually(t, 30*time.Second, "deliveries fail while the database is unreachable", func() bool {
			_, failures, _ := r.rec.totals()
			return failures >= 2*len(ids)
		})
		_, _, acks := r.rec.totals()
		require.Zero(t, acks)
		proxy.SetRefusing(false)
		testutil.Eventually(t, 30*time.Second, "processing resumed", func() bool {
			_, _, acks := r.rec.totals()
			return acks == len(ids) && queueEmpty(t, r.client, r.q.URL)
		})
		r.settledOnce(ids, exactlyonce.ByProcessor)
		r.rec.requireNoViolations(t)
	})
}

// Invariant: processing slower than the visibility timeout is not delivered twice, because the
// processor extends the batch's visibility while it works. The control run, without the extension,
// shows the queue does deliver it again meanwhile (so the test can fail), and the event is still
// processed once.
func TestSlowProcessingExtendsVisibility(t *testing.T) {
	t.Parallel()
	for _, extend := range []bool{true, false} {
		name := map[bool]string{true: "extended", false: "control without extension"}[extend]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOptions{visibility: 2, maxReceive: 10})
			// Processing takes 5 s, the visibility timeout is 2 s. The sleep is the injected slowness
			// of the work, not synchronisation.
			r.proc.Engine.Works = valueWork(func(id int64) string { time.Sleep(5 * time.Second); return fixedValue(id) })
			if extend {
				r.proc.Visibility = &sqsbatch.Visibility{Client: r.client, QueueURL: r.q.URL,
					Heartbeat: 500 * time.Millisecond, Extension: 2 * time.Second}
			}
			id := r.pending(1)[0]
			msgID := r.send(queue.Encode(id))[0]
			r.run(2, 1)
			testutil.Eventually(t, 60*time.Second, "the message is acknowledged and gone", func() bool {
				return r.rec.get(r.rec.acks, msgID) >= 1 && queueEmpty(t, r.client, r.q.URL)
			})
			r.settledOnce([]int64{id}, exactlyonce.ByProcessor)
			if extend {
				require.Equal(t, 1, r.rec.get(r.rec.deliveries, msgID), "no second delivery while the first worked")
				require.GreaterOrEqual(t, r.proc.Visibility.Extended.Load(), int64(5))
			} else {
				require.GreaterOrEqual(t, r.rec.get(r.rec.deliveries, msgID), 2, "without the extension the queue delivers it again")
			}
			r.rec.requireNoViolations(t)
		})
	}
}
