package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/stretchr/testify/require"
)

// switchHook is a webhook receiver that answers 400 to every delivery while fail is set, and to a
// payload that contains "fail" while failMarked is set; 200 otherwise. It records the payloads it
// took (answered 200), in order.
type switchHook struct {
	fail, failMarked atomic.Bool
	mu               sync.Mutex
	took             []string
}

func (h *switchHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if h.fail.Load() || (h.failMarked.Load() && strings.Contains(string(body), "fail")) {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.took = append(h.took, string(body))
	h.mu.Unlock()
}

func (h *switchHook) taken() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.took...)
}

func retried(got map[string]any) []int64 {
	var ids []int64
	for _, id := range got["retried"].([]any) {
		ids = append(ids, int64(id.(float64)))
	}
	return ids
}

// A reference whose tasks all failed is retried in place: its tasks are delivered in their order.
// One whose later task completed is retried to the end, behind the task open now, the failed ones
// in their order. A reference with no failed task retries nothing; a bad reference is a 400.
func TestRetryReference(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &switchHook{}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	task := func(ref, payload string) int64 {
		return createTask(t, b, `{"url": "`+recv.URL+`", "payload": "`+payload+`", "referenceId": "`+ref+`"}`)
	}

	// All four of "a" fail (each promoted after the one before it failed); "m": 1 and 3 fail, 2
	// completes, then 4 is created, pending behind nobody.
	hook.fail.Store(true)
	a := []int64{task("a", "a1"), task("a", "a2"), task("a", "a3"), task("a", "a4")}
	deliverAll(t, b.store)
	hook.fail.Store(false)
	hook.failMarked.Store(true)
	m1, _, m3 := task("m", "m1 fail"), task("m", "m2"), task("m", "m3 fail")
	deliverAll(t, b.store)
	fold(t, b) // some failed tasks folded (40), so the retry takes them off settled_count
	m4 := task("m", "m4")
	require.Equal(t, []string{`"m2"`}, hook.taken())

	status, got, _ := b.do(t, "POST", "/references/a/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	require.Equal(t, "a", got["referenceId"])
	require.Equal(t, a, retried(got), "every failed task, in order")
	require.Equal(t, "in-place", got["placement"])
	status, got, _ = b.do(t, "POST", "/references/m/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	require.Equal(t, []int64{m1, m3}, retried(got))
	require.Equal(t, "end", got["placement"], "m2 had completed")
	require.Contains(t, b.queue.ids, a[0], "the head of a is queued")

	// Only a reference's head is pending; the others wait, queued.
	ids, _, _ := listIDs(t, b, "/events?state=pending&kind=task")
	require.ElementsMatch(t, []int64{a[0], m4}, ids)
	ids, _, _ = listIDs(t, b, "/events?state=queued")
	require.ElementsMatch(t, []int64{a[1], a[2], a[3], m1, m3}, ids)
	overview(t, b)

	hook.failMarked.Store(false)
	deliverAll(t, b.store)
	var gotA, gotM []string
	for _, p := range hook.taken()[1:] {
		if strings.HasPrefix(p, `"a`) {
			gotA = append(gotA, p)
		} else {
			gotM = append(gotM, p)
		}
	}
	require.Equal(t, []string{`"a1"`, `"a2"`, `"a3"`, `"a4"`}, gotA, "a's tasks in their order")
	require.Equal(t, []string{`"m4"`, `"m1 fail"`, `"m3 fail"`}, gotM, "m's retried tasks after the one open, in their order")
	overview(t, b)

	status, got, _ = b.do(t, "POST", "/references/a/retry", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []any{}, got["retried"], "nothing failed: nothing retried")
	require.Nil(t, got["placement"])
	status, got, _ = b.do(t, "POST", "/references/nobody/retry", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []any{}, got["retried"])
	for _, path := range []string{"/references/" + strings.Repeat("r", 256) + "/retry", "/references/a%01b/retry"} {
		status, got, _ = b.do(t, "POST", path, "")
		require.Equal(t, http.StatusBadRequest, status, "%v", got)
		require.Contains(t, got["error"], "referenceId")
	}
}

// A part of a bulk retry (here the only one: 3 failed tasks) is one transaction: one stopped before it commits (here, waiting for settled_count's
// row, held by the test, when its context ends) leaves every task failed and the count as it was.
func TestRetryReferenceIsAtomic(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &switchHook{}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	hook.fail.Store(true)
	var ids []int64
	for _, p := range []string{"1", "2", "3"} {
		ids = append(ids, createTask(t, b, `{"url": "`+recv.URL+`", "payload": `+p+`, "referenceId": "x"}`))
	}
	deliverAll(t, b.store)
	fold(t, b)
	before := overview(t, b)

	ctx := context.Background()
	holder, err := b.store.DB.Pool().BeginTx(ctx, nil)
	require.NoError(t, err)
	var n int64
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT n FROM settled_count FOR UPDATE").Scan(&n))
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err = b.store.Tasks.RetryReference(short, "x")
	cancel()
	require.Error(t, err, "stopped while it waited for settled_count")
	require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err))
	require.NoError(t, holder.Rollback())

	got, _, _ := listIDs(t, b, "/events?state=failed")
	require.Equal(t, []int64{ids[2], ids[1], ids[0]}, got, "every task still failed")
	require.Equal(t, before["events"], overview(t, b)["events"], "the count unchanged")

	// And once nothing holds it, the retry goes through whole.
	status, answer, _ := b.do(t, "POST", "/references/x/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", answer)
	require.Equal(t, ids, retried(answer))
	hook.fail.Store(false)
	deliverAll(t, b.store)
	require.Equal(t, []string{"1", "2", "3"}, hook.taken())
	overview(t, b)
}

// A reference with more failed tasks than a part holds is retried in parts: each call answers what
// it retried and more while some remain; the head's queue message goes with the last part (until
// then it is held), and the reference's tasks are then delivered in their order.
func TestRetryReferenceInParts(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	b.store.Tasks.RetryParts(3, time.Nanosecond) // one part of 3 a call
	hook := &switchHook{}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	hook.fail.Store(true)
	var ids []int64
	var want []string
	for i := range 7 {
		p := string(rune('a' + i))
		ids = append(ids, createTask(t, b, `{"url": "`+recv.URL+`", "payload": "`+p+`", "referenceId": "big"}`))
		want = append(want, `"`+p+`"`)
	}
	deliverAll(t, b.store)
	hook.fail.Store(false)

	sent := len(b.queue.ids)
	var all []int64
	for call := 1; ; call++ {
		status, got, _ := b.do(t, "POST", "/references/big/retry", "")
		require.Equal(t, http.StatusOK, status, "%v", got)
		require.Equal(t, "in-place", got["placement"])
		all = append(all, retried(got)...)
		if got["more"] == false {
			require.Equal(t, 3, call)
			break
		}
		require.Equal(t, true, got["more"])
		require.NotContains(t, b.queue.ids[sent:], ids[0], "the held head has no message yet")
		due, err := deliverer(b.store).ProcessDue(context.Background(), 0, 50)
		require.NoError(t, err)
		require.Zero(t, due.Claimed, "nothing of the reference is due between parts")
	}
	require.Equal(t, ids, all, "every failed task once, in order")
	require.Contains(t, b.queue.ids[sent:], ids[0], "the last part's head is queued")
	deliverAll(t, b.store)
	require.Equal(t, want, hook.taken(), "delivered in their order")
}

// A reference's retry to the end behind a task that is open now (claimed) goes in parts over HTTP
// too: each call answers `more` until the last; between calls the open task settles, a create of
// the reference comes, and the deliveries stop at the frontier the first part holds (the last of
// its tasks), the create not delivered before the failed tasks not retried yet; the last call
// names the frontier, pending by then, as its head, and queues its message; then every task is
// delivered in order, the create last. Before, the first call retried them all in one transaction.
func TestRetryReferenceInPartsBehindAnOpenTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := taskServer(t)
	b.store.Tasks.RetryParts(3, time.Nanosecond) // one part of 3 a call
	hook := &switchHook{}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	hook.fail.Store(true)
	var ids []int64
	var want []string
	for i := range 7 {
		p := string(rune('a' + i))
		ids = append(ids, createTask(t, b, `{"url": "`+recv.URL+`", "payload": "`+p+`", "referenceId": "open"}`))
		want = append(want, `"`+p+`"`)
	}
	deliverAll(t, b.store)
	hook.fail.Store(false)
	open := createTask(t, b, `{"url": "`+recv.URL+`", "payload": "open", "referenceId": "open"}`)
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := b.store.Events.ClaimIDs(ctx, c, []int64{open}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 1)

	sent := len(b.queue.ids)
	var all []int64
	for call := 1; ; call++ {
		status, got, _ := b.do(t, "POST", "/references/open/retry", "")
		require.Equal(t, http.StatusOK, status, "%v", got)
		require.Equal(t, "end", got["placement"])
		all = append(all, retried(got)...)
		if got["more"] == false {
			require.Equal(t, 3, call)
			break
		}
		require.Equal(t, true, got["more"], "call %d", call)
		if call == 1 {
			createTask(t, b, `{"url": "`+recv.URL+`", "payload": "created", "referenceId": "open"}`)
			e := claimed.Leased[0]
			_, err := b.store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: e, Delivered: true,
				Attempt: exactlyonce.Attempt{Number: e.Attempts + 1, Started: time.Now(), Status: 200}}}, false)
			require.NoError(t, err)
			for { // what is due, until nothing is: the frontier, promoted, stays held
				due, err := deliverer(b.store).ProcessDue(ctx, 0, 50)
				require.NoError(t, err)
				if due.Claimed == 0 {
					break
				}
			}
			require.Equal(t, want[:2], hook.taken(), "delivered up to the frontier, not past it")
		}
	}
	require.Equal(t, ids, all, "every failed task once, in order")
	require.Contains(t, b.queue.ids[sent:], ids[2], "the frontier, released, is queued")
	deliverAll(t, b.store)
	require.Equal(t, append(want, `"created"`), hook.taken(), "delivered in their order, the create last")
}
