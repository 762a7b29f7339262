package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// keyedPost sends a create with an Idempotency-Key and body {} and returns the status, the body as
// received, and whether it was a replay. err is the transport's (a process killed mid-request).
// The body is one Go's client cannot rewind: it resends by itself a request that carries an
// Idempotency-Key and whose body it can rewind when its connection breaks, which would hide a cut.
func keyedPost(client *http.Client, url, path, key string) (status int, body []byte, replayed bool, err error) {
	req, err := http.NewRequest(http.MethodPost, url+path, io.NopCloser(strings.NewReader("{}")))
	if err != nil {
		return 0, nil, false, err
	}
	req.Header.Set(api.KeyHeader, key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, false, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Header.Get(api.ReplayedHeader) == "true", err
}

func answeredID(t *testing.T, body []byte) int64 {
	t.Helper()
	var m struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &m), "%s", body)
	require.Positive(t, m.ID, "%s", body)
	return m.ID
}

// Invariant: a keyed create whose commit's reply is lost (the client got a 503) is stored with its
// key, and its retry with the key answers the original answer, with the original id: one event.
// It is what TestCreateWhoseCommitReplyIsLost shows a create without a key cannot do. An async
// create's message: the first attempt took its create for failed and sent none, and the replay
// sends none (a repeat never sends one), so its event is left, pending, to the sweeper, which
// settles it once; no event gets two messages.
func TestKeyedCreateWhoseCommitReplyIsLost(t *testing.T) {
	t.Parallel()
	groups := map[string]api.AsyncGroup{"lambda": {Inline: true}, "local": {Linger: wire.DefaultAsyncLinger}}
	for _, allocator := range []string{mysql.DefaultAllocator, mysql.AllocatorLiteral} {
		for _, path := range []string{"/events", "/events/async"} {
			for name, group := range groups {
				t.Run(allocator+" "+name+" POST "+path, func(t *testing.T) {
					t.Parallel()
					keyedCreateWhoseCommitReplyIsLost(t, allocator, path, group)
				})
			}
		}
	}
}

func keyedCreateWhoseCommitReplyIsLost(t *testing.T, allocator, path string, group api.AsyncGroup) {
	ctx := context.Background()
	direct, dsn := testdb.DB(t, 4)
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	proxy := fault.StartProxy(t, cfg.Addr)
	db, err := mysql.Open(mysql.ConnConfig{DSN: proxy.DSN(dsn), MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := wire.StoresOn(db, mysql.Config{Allocator: allocator})
	require.NoError(t, err)
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	srv := openapitest.NewServer(t, &api.Server{Stores: store.API(), Queue: &queue.SQSSender{Client: client, QueueURL: q.URL}, Logger: testLogger(),
		AsyncGroup: group})
	t.Cleanup(srv.Close)
	check, err := wire.StoresOn(direct, mysql.Config{})
	require.NoError(t, err)
	async := path == "/events/async"
	created := http.StatusCreated
	if async {
		created = http.StatusAccepted
	}
	hc := &http.Client{Timeout: 30 * time.Second}

	// One keyed create answered normally first, so that the allocator's own transactions are
	// behind us, and its repeat.
	status, body, replayed, err := keyedPost(hc, srv.URL, path, "warm-up")
	require.NoError(t, err)
	require.Equal(t, created, status, "%s", body)
	require.False(t, replayed)
	first := answeredID(t, body)
	if async {
		testutil.Eventually(t, 10*time.Second, "the answered async create's message is queued", func() bool {
			return !queueEmpty(t, client, q.URL)
		})
		require.Equal(t, []int64{first}, takeMessages(t, client, q.URL))
	}

	proxy.LoseRepliesCommitting("INSERT INTO events", 1)
	status, body, _, err = keyedPost(hc, srv.URL, path, "lost-reply")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, status, "the client cannot know the create happened: %s", body)
	require.NotContains(t, string(body), `"id"`)
	require.EqualValues(t, 1, proxy.LostStatementReplies.Load(), "the server committed the create and its reply was lost")
	audit, err := mysqltest.AuditEvents(ctx, check.DB.Pool())
	require.NoError(t, err)
	require.Len(t, audit, 2, "the first event and the one whose answer was lost")
	var orphan verify.Audit
	for _, e := range audit {
		if e.ID != first {
			orphan = e
		}
	}

	// The retry the 503 invites, with the key: the original answer, the original id.
	status, body, replayed, err = keyedPost(hc, srv.URL, path, "lost-reply")
	require.NoError(t, err)
	require.Equal(t, created, status, "%s", body)
	require.True(t, replayed, "the stored answer, replayed")
	require.Equal(t, orphan.ID, answeredID(t, body), "the retry answers the event the lost reply created")
	again, err := mysqltest.AuditEvents(ctx, check.DB.Pool())
	require.NoError(t, err)
	require.Len(t, again, 2, "no second event")

	if async {
		require.True(t, queueEmpty(t, client, q.URL), "neither the failed attempt nor the replay sent a message")
		ledger := verify.NewLedger()
		res, err := sweeping.New(check.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Logger: testLogger(), Engine: processing.Engine{Report: ledger}}).Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Processed)
		requireSettledOnce(t, check, ledger, []int64{first, orphan.ID}, exactlyonce.BySweeper)
	} else {
		require.Equal(t, exactlyonce.Processed, orphan.State)
		require.Equal(t, exactlyonce.ByAPI, orphan.By)
	}
}

// Invariant: an API process killed with SIGKILL while clients create with keys leaves, for every
// key, at most one event: the retry of every key against a new process gets the original answer
// (the same id, for a key whose answer a client received; the stored one, for a create cut off
// after its commit) or, for a create cut off before its commit, a fresh one; afterwards every key
// names exactly one event and every event one key.
func TestAPIKilledMidKeyedRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testdb.DB(t, 8)
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	env := []string{"DB_DSN=" + dsn, "QUEUE_URL=" + q.URL, "AWS_ENDPOINT_URL_SQS=" + localsqs.Endpoint(t)}
	startAPI := func() (*child.Process, string) {
		c := child.Start(t, "api", env...)
		line, err := c.WaitLine("listening ", 30*time.Second)
		require.NoError(t, err)
		return c, line[len("listening "):]
	}
	check, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	proc, url := startAPI()
	var (
		mu       sync.Mutex
		sent     []string // every key sent, in order
		paths    = map[string]string{}
		answered = map[string]int64{} // key -> id the client received
		cutOff   atomic.Int64
	)
	// A connection per client, kept: a request is then in flight on it whenever its client is not
	// between two (with Go's default of 2 idle connections per host, most requests dial anew, and
	// a kill between the dials cuts nothing).
	hc := &http.Client{Timeout: 10 * time.Second, Transport: openapitest.Transport(t, &http.Transport{MaxIdleConnsPerHost: 16})}
	var wg sync.WaitGroup
	for c := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("client-%d-%d", c, i)
				path := "/events"
				if (c+i)%2 == 1 {
					path = "/events/async"
				}
				mu.Lock()
				sent = append(sent, key)
				paths[key] = path
				mu.Unlock()
				status, body, _, err := keyedPost(hc, url, path, key)
				if err != nil {
					if !errors.Is(err, syscall.ECONNREFUSED) {
						cutOff.Add(1)
					}
					return // the process is gone
				}
				if status/100 != 2 {
					continue
				}
				var m struct{ ID int64 }
				if json.Unmarshal(body, &m) != nil {
					cutOff.Add(1)
					return
				}
				mu.Lock()
				answered[key] = m.ID
				mu.Unlock()
			}
		}()
	}
	testutil.Eventually(t, 30*time.Second, "the API answered 150 keyed creates", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= 150
	})
	proc.Kill() // mid-request: twelve clients are creating as fast as they can
	wg.Wait()
	require.Positive(t, cutOff.Load(), "the kill cut requests off")

	// Every key again, against a new process.
	_, url = startAPI()
	ids := map[int64]string{} // event id -> the key that answers it
	replays, fresh := 0, 0
	for _, key := range sent {
		status, body, replayed, err := keyedPost(hc, url, paths[key], key)
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, status, "%s: %s", key, body)
		id := answeredID(t, body)
		if orig, ok := answered[key]; ok {
			require.True(t, replayed, "%s was answered: its retry is a replay", key)
			require.Equal(t, orig, id, "%s: the original id", key)
		}
		if replayed {
			replays++
		} else {
			fresh++
		}
		other, dup := ids[id]
		require.False(t, dup, "event %d answers keys %s and %s", id, other, key)
		ids[id] = key
	}
	audit, err := mysqltest.AuditEvents(ctx, check.DB.Pool())
	require.NoError(t, err)
	require.Len(t, audit, len(sent), "one event per key, no more")
	for _, e := range audit {
		_, ok := ids[e.ID]
		require.True(t, ok, "event %d is the answer of a key", e.ID)
	}
	t.Logf("%d keys sent, %d answered before the kill, %d requests cut off; on retry %d replayed, %d created afresh",
		len(sent), len(answered), cutOff.Load(), replays, fresh)
}
