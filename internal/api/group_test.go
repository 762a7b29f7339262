package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// gateStore hands out ids from memory, records each batch, and holds its first batch until
// released, so that a test can line requests up behind it.
type gateStore struct {
	EventStore // only CreatePendingBatch is used
	mu         sync.Mutex
	next       int64
	batches    [][]int64
	entered    chan struct{}
	release    chan struct{}
	failAfter  int // fail every batch after this many; 0: never
}

func (s *gateStore) CreatePendingBatch(ctx context.Context, n int) ([]int64, error) {
	s.mu.Lock()
	first := len(s.batches) == 0
	if s.failAfter > 0 && len(s.batches) >= s.failAfter {
		s.mu.Unlock()
		return nil, exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "down")
	}
	ids := make([]int64, n)
	for i := range ids {
		s.next++
		ids[i] = s.next
	}
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	if first {
		close(s.entered)
		<-s.release
	}
	return ids, nil
}

// Requests that arrive while a group is being stored share the next group: one INSERT and one
// message for all of them, each request with its own id.
func TestAsyncRequestsArrivingTogetherShareOneInsertAndOneMessage(t *testing.T) {
	t.Parallel()
	store := &gateStore{entered: make(chan struct{}), release: make(chan struct{})}
	q := &slowQueue{} // never slow: hold is nil
	s := &Server{Stores: Stores{Events: store}, Queue: q, AsyncGroup: AsyncGroup{Max: 5}}
	srv := openapitest.NewServer(t, s)
	t.Cleanup(srv.Close)

	post := func() (int, int64) {
		resp, err := http.Post(srv.URL+"/events/async", "application/json", nil)
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		var m map[string]int64
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m["id"]
	}
	type answer struct {
		status int
		id     int64
	}
	answers := make(chan answer, 8)
	go func() { st, id := post(); answers <- answer{st, id} }()
	<-store.entered // the first request is being stored, alone
	for range 7 {
		go func() { st, id := post(); answers <- answer{st, id} }()
	}
	testutil.Eventually(t, 10*time.Second, "7 requests wait behind the first group", func() bool { return s.groups.group.Waiting() == 7 })
	close(store.release)

	seen := map[int64]bool{}
	for range 8 {
		a := <-answers
		require.Equal(t, http.StatusAccepted, a.status)
		require.False(t, seen[a.id], "id %d answered twice", a.id)
		seen[a.id] = true
	}
	// Max 5: the 7 waiting requests make a group of 5 and a group of 2.
	require.Equal(t, [][]int64{{1}, {2, 3, 4, 5, 6}, {7, 8}}, store.batches)
	require.Equal(t, store.batches, q.messages(), "one message per group, naming exactly its events")
}

// A group that cannot be stored fails every request in it, with the store's error, and sends nothing.
func TestAsyncGroupThatCannotBeStoredFailsEachRequest(t *testing.T) {
	t.Parallel()
	store := &gateStore{entered: make(chan struct{}), release: make(chan struct{}), failAfter: 1}
	close(store.release)
	q := &slowQueue{} // never slow: hold is nil
	s := &Server{Stores: Stores{Events: store}, Queue: q}
	g := newAsyncGroups(s)
	_, err := g.create(context.Background())
	require.NoError(t, err)
	_, err = g.create(context.Background())
	var de *exactlyonce.Error
	require.True(t, errors.As(err, &de) && de.Code == exactlyonce.EUNAVAILABLE, "got %v", err)
	require.Len(t, q.messages(), 1, "nothing sent for the group that failed")
}

// gateKeys stores keyed creates in memory, records the size of each group, and holds its first
// group until released.
type gateKeys struct {
	mu      sync.Mutex
	groups  []int
	entered chan struct{}
	release chan struct{}
}

func (s *gateKeys) CreateKeyed(ctx context.Context, opt exactlyonce.KeyOptions, creates []exactlyonce.KeyedCreate) ([]exactlyonce.KeyedResult, error) {
	s.mu.Lock()
	first := len(s.groups) == 0
	s.groups = append(s.groups, len(creates))
	s.mu.Unlock()
	if first {
		close(s.entered)
		<-s.release
	}
	out := make([]exactlyonce.KeyedResult, len(creates))
	for i := range out {
		out[i] = exactlyonce.KeyedResult{Created: true, Record: exactlyonce.KeyRecord{EventID: int64(i + 1)}}
	}
	return out, nil
}

// Keyed creates waiting for a group are grouped by bytes as well as by rows: 64 keyed task creates
// of 256 KiB each make two groups of 8 MiB, not one of 16.
func TestKeyedGroupsAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	store := &gateKeys{entered: make(chan struct{}), release: make(chan struct{})}
	s := &Server{Stores: Stores{Keys: store}}
	g := s.keyGroups(store)
	// One group at a time, so that all 64 line up behind the first (with keyedShareAt, a second
	// group would take the first 8 that wait): the bytes alone cut them.
	g.group.ShareAt = 0
	create := func(i int, payload int) error {
		task := &exactlyonce.NewTask{URL: "https://example.com/", Payload: make([]byte, payload)}
		_, err := g.create(context.Background(), exactlyonce.KeyedCreate{Key: exactlyonce.KeyHash("", fmt.Sprint(i)), Pending: true, Task: task})
		return err
	}
	errs := make(chan error, 65)
	go func() { errs <- create(-1, 1) }()
	<-store.entered
	for i := range 64 {
		go func() { errs <- create(i, exactlyonce.MaxTaskPayloadBytes-len("https://example.com/")) }()
	}
	testutil.Eventually(t, 10*time.Second, "64 creates wait behind the first group", func() bool { return g.group.Waiting() == 64 })
	close(store.release)
	for range 65 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, []int{1, 32, 32}, store.groups)
}
