package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func getJSON(t *testing.T, s *api.Server, path string, status int, v any) {
	t.Helper()
	rec := httptest.NewRecorder()
	openapitest.Handler(t, s).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	require.Equal(t, status, rec.Code, rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), v))
}

// GET /workers lists the event workers' registry, live ones first; ?active=true|false filters it;
// GET /workers/{workerId} shows one. A bad active value or another parameter is a 400, an unknown
// id a 404, both JSON.
func TestGetWorkers(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{
		{URL: "http://127.0.0.1:1/a", Payload: json.RawMessage(`{}`), ReferenceID: "ref-a"},
		{URL: "http://127.0.0.1:1/b", Payload: json.RawMessage(`{}`), ReferenceID: "ref-b"},
	})
	require.NoError(t, err)
	// Two workers as an EventService would write them: one live, one whose task completed and that
	// is done (it was willTerminate).
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: exactlyonce.BySweeper, Lease: 60e9}
	claimed, err := store.Events.ClaimIDs(ctx, c, []int64{created[0].ID, created[1].ID}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 2)
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 7, exactlyonce.WorkerAssignment{
		New: []exactlyonce.EventWorker{{ID: "w_live", AgentID: 7, MaxReferenceCount: 3},
			{ID: "w_done", AgentID: 7, MaxReferenceCount: 1, WillTerminate: true}},
		Grow: []exactlyonce.WorkerGrowth{{ID: "w_live", AddTasks: 1, References: []string{"ref-a"}},
			{ID: "w_done", AddTasks: 1, References: []string{"ref-b"}, WillTerminate: true}},
		Tasks: map[string][]int64{"w_live": {created[0].ID}, "w_done": {created[1].ID}},
	}))
	var done exactlyonce.Event
	for _, ev := range claimed.Leased {
		if ev.ID == created[1].ID {
			done = ev
		}
	}
	done.Task.WorkerID = "w_done"
	_, err = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: done, Delivered: true,
		Attempt: exactlyonce.Attempt{Number: 1, Status: 200}}}, false)
	require.NoError(t, err)

	s := &api.Server{Stores: store.API()}
	var list struct {
		Workers []api.WorkerJSON `json:"workers"`
	}
	getJSON(t, s, "/workers", http.StatusOK, &list)
	require.Len(t, list.Workers, 2)
	require.Equal(t, "w_live", list.Workers[0].WorkerID)
	require.Equal(t, []string{"ref-a"}, list.Workers[0].References)
	require.Equal(t, int64(1), list.Workers[0].TasksRemaining)
	require.False(t, list.Workers[0].IsDone)
	require.Nil(t, list.Workers[0].LastCompletedTask)
	require.Equal(t, "w_done", list.Workers[1].WorkerID)
	require.True(t, list.Workers[1].IsDone)
	require.True(t, list.Workers[1].WillTerminate)
	require.Equal(t, int64(1), list.Workers[1].TasksCompleted)
	require.Equal(t, created[1].ID, *list.Workers[1].LastCompletedTask)
	require.Equal(t, int64(7), list.Workers[1].AgentID)

	getJSON(t, s, "/workers?active=true", http.StatusOK, &list)
	require.Len(t, list.Workers, 1)
	require.Equal(t, "w_live", list.Workers[0].WorkerID)
	getJSON(t, s, "/workers?active=false", http.StatusOK, &list)
	require.Len(t, list.Workers, 1)
	require.Equal(t, "w_done", list.Workers[0].WorkerID)

	var one api.WorkerJSON
	getJSON(t, s, "/workers/w_done", http.StatusOK, &one)
	require.Equal(t, "w_done", one.WorkerID)
	require.Equal(t, 1, one.MaxReferenceCount)

	var e struct {
		Error string `json:"error"`
	}
	for _, bad := range []string{"/workers?active=yes", "/workers?active=", "/workers?active=TRUE"} {
		getJSON(t, s, bad, http.StatusBadRequest, &e)
		require.Contains(t, e.Error, "active must be true or false")
	}
	// An unknown parameter is refused, as the other listings refuse one: ?Active=true or
	// ?activ=false, a filter misspelt, listed every worker.
	for _, bad := range []string{"/workers?Active=true", "/workers?activ=false", "/workers?active=true&limit=5"} {
		getJSON(t, s, bad, http.StatusBadRequest, &e)
		require.Contains(t, e.Error, "unknown query parameter", bad)
	}
	// The id is compared byte for byte, as Go compares it: another case, or a trailing space, names
	// no worker (the column's collation ignores both).
	for _, other := range []string{"/workers/W_DONE", "/workers/w_done%20", "/workers/w_Done"} {
		getJSON(t, s, other, http.StatusNotFound, &e)
		require.Contains(t, e.Error, "no event worker", other)
	}
	getJSON(t, s, "/workers/w_nope", http.StatusNotFound, &e)
	require.Contains(t, e.Error, "no event worker")
	getJSON(t, s, "/workers/"+strings.Repeat("w", 40), http.StatusNotFound, &e)
}

// GET /workers ends its list before it passes 4 MiB (api.MaxListPayloadBytes), the live workers
// first: each worker holds up to 100 references of up to 255 characters, and 1,000 done workers
// kept for audit could make an answer of 25 MB, which a Lambda cannot give (6 MB at most). 200
// live workers of 100 long references (5.2 MB) are listed in part, whole ones, and each of them
// is still GET /workers/{workerId}.
func TestGetWorkersIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	const workers, refs = 200, 100
	var ws []exactlyonce.EventWorker
	for i := range workers {
		w := exactlyonce.EventWorker{ID: fmt.Sprintf("w_%03d", i), AgentID: 7, MaxReferenceCount: refs, WillTerminate: true}
		for j := range refs {
			w.References = append(w.References, fmt.Sprintf("%03d-%03d-", i, j)+strings.Repeat("r", 247))
		}
		ws = append(ws, w)
	}
	for lo := 0; lo < workers; lo += 50 {
		require.NoError(t, store.Agents.AssignWorkers(ctx, exactlyonce.NewClaimID(), 7, exactlyonce.WorkerAssignment{New: ws[lo : lo+50]}))
	}
	s := &api.Server{Stores: store.API()}
	for _, path := range []string{"/workers", "/workers?active=true"} {
		rec := httptest.NewRecorder()
		openapitest.Handler(t, s).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.LessOrEqual(t, rec.Body.Len(), api.MaxListPayloadBytes+1024, path)
		var list struct {
			Workers   []api.WorkerJSON `json:"workers"`
			Truncated bool             `json:"truncated"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
		require.Greater(t, len(list.Workers), 100, path)
		require.Less(t, len(list.Workers), workers, path)
		require.True(t, list.Truncated, "%s: a list cut short says so", path)
		for i, w := range list.Workers {
			require.Equal(t, fmt.Sprintf("w_%03d", i), w.WorkerID, "oldest first")
			require.Len(t, w.References, refs)
		}
	}
	var one api.WorkerJSON
	getJSON(t, s, fmt.Sprintf("/workers/w_%03d", workers-1), http.StatusOK, &one)
	require.Len(t, one.References, refs)
}

// GET /workers reads a page, not every worker: with 600 live workers of 25 KB of references each
// (15 MB), the answer ends at 4 MiB, and the rows the listing reads with their references are the
// answer's and the few more that fill 4 MiB as the database holds them (the answer counts the
// references' quotes and escapes too), where it read all 600 before cutting the answer.
func TestGetWorkersReadsAPageNotEveryWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 4)
	db, tally := mysqltest.TalliedDB(t, dsn, 4, "reference_ids, first_hash")
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const workers, refs = 600, 100
	var ws []exactlyonce.EventWorker
	for i := range workers {
		w := exactlyonce.EventWorker{ID: fmt.Sprintf("w_%03d", i), AgentID: 7, MaxReferenceCount: refs, WillTerminate: true}
		for j := range refs {
			w.References = append(w.References, fmt.Sprintf("%03d-%03d-", i, j)+strings.Repeat("r", 247))
		}
		ws = append(ws, w)
	}
	for lo := 0; lo < workers; lo += 50 {
		require.NoError(t, store.Agents.AssignWorkers(ctx, exactlyonce.NewClaimID(), 7, exactlyonce.WorkerAssignment{New: ws[lo : lo+50]}))
	}
	s := &api.Server{Stores: store.API()}
	before := tally.Rows()
	rec := httptest.NewRecorder()
	openapitest.Handler(t, s).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/workers", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	read := tally.Rows() - before
	var list struct {
		Workers   []api.WorkerJSON `json:"workers"`
		Truncated bool             `json:"truncated"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	require.True(t, list.Truncated)
	require.Greater(t, len(list.Workers), 100)
	require.LessOrEqual(t, read, int64(len(list.Workers)+5), "the rows read with their references: the answer's, and a few more")
}

// GET /workers pages through its reads in order: 450 live workers and 250 done ones, written 50 at
// a time (so that many share a createdAt, and the done ones a done time), are listed whole, the
// live ones oldest first and then the done ones most recently done first, each once.
func TestGetWorkersListsEveryWorkerAcrossItsReads(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	const live, done = 450, 250
	var ws []exactlyonce.EventWorker
	for i := range live + done {
		ws = append(ws, exactlyonce.EventWorker{ID: fmt.Sprintf("w_%04d", i), AgentID: 7, MaxReferenceCount: 1,
			References: []string{fmt.Sprintf("ref-%d", i)}})
	}
	for lo := 0; lo < live+done; lo += 50 {
		require.NoError(t, store.Agents.AssignWorkers(ctx, exactlyonce.NewClaimID(), 7, exactlyonce.WorkerAssignment{New: ws[lo : lo+50]}))
	}
	for lo := live; lo < live+done; lo += 50 {
		var ids []string
		for _, w := range ws[lo : lo+50] {
			ids = append(ids, w.ID)
		}
		require.NoError(t, store.Agents.StopWorkers(ctx, ids)) // nothing left: done at once
	}
	wantLive, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	wantDone, err := store.Agents.DoneWorkers(ctx, 1000)
	require.NoError(t, err)
	require.Len(t, wantLive, live)
	require.Len(t, wantDone, done)
	ids := func(ws []exactlyonce.EventWorker) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	s := &api.Server{Stores: store.API()}
	for path, want := range map[string][]string{
		"/workers":              append(ids(wantLive), ids(wantDone)...),
		"/workers?active=true":  ids(wantLive),
		"/workers?active=false": ids(wantDone),
	} {
		var list struct {
			Workers   []api.WorkerJSON `json:"workers"`
			Truncated bool             `json:"truncated"`
		}
		getJSON(t, s, path, http.StatusOK, &list)
		require.False(t, list.Truncated, path)
		var got []string
		for _, w := range list.Workers {
			got = append(got, w.WorkerID)
		}
		require.Equal(t, want, got, path)
	}
}
