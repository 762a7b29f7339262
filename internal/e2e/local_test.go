package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testenv"
	"github.com/stretchr/testify/require"
)

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, m
}

func postJSON(url string) (int, map[string]any, error) {
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	err = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, err
}

func startSystem(t *testing.T, queues queue.Queues, store *mysql.Store, grace time.Duration) *local.System {
	t.Helper()
	client := testenv.SQS(t)
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := local.Start(ctx, store, client, local.Options{
		HTTPAddr: "127.0.0.1:0", Queues: queues, SweepInterval: 100 * time.Millisecond,
		Sweep: sweeping.Config{Grace: grace, Logger: testLogger()},
	}, testLogger())
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sys.Wait())
	})
	return sys
}

// The contract, over HTTP, with the real queue path: concurrent sync and async creates; every async
// event gets its value within seconds, processed once; the count is exact.
func TestLocalSystemEndToEnd(t *testing.T) {
	t.Parallel()
	store := testenv.Store(t, mysql.StoreConfig{}, 16)
	client := testenv.SQS(t)
	q := testenv.Queues(t, client, 30, 5)
	// A long grace keeps the sweeper out of it: every async event must come through the queue.
	sys := startSystem(t, q, store, time.Hour)

	const clients, each = 8, 10
	var (
		mu       sync.Mutex
		asyncIDs []int64
		all      = map[int64]bool{}
		wg       sync.WaitGroup
	)
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				path, want := "/events", http.StatusCreated
				if (c+i)%2 == 1 {
					path, want = "/events/async", http.StatusAccepted
				}
				status, m, err := postJSON(sys.URL + path)
				if err == nil && status != want {
					err = fmt.Errorf("POST %s: %d %v", path, status, m)
				}
				if err != nil {
					errs <- err
					return
				}
				id := int64(m["id"].(float64))
				mu.Lock()
				all[id] = true
				if want == http.StatusAccepted {
					asyncIDs = append(asyncIDs, id)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, all, clients*each, "every id unique")

	for _, id := range asyncIDs {
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("event %d has its value", id), func() bool {
			_, m := getJSON(t, fmt.Sprintf("%s/events/%d", sys.URL, id))
			return m["value"] != nil
		})
		_, m := getJSON(t, fmt.Sprintf("%s/events/%d", sys.URL, id))
		require.Equal(t, "processor", m["processedBy"])
		require.EqualValues(t, 1, m["processCount"])
	}
	status, m := getJSON(t, sys.URL+"/events")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, clients*each, m["count"])
}

// If the queue send fails after the insert commits, the client still has its id and the sweeper
// processes the event.
func TestQueueSendFailureIsCoveredByTheSweeper(t *testing.T) {
	t.Parallel()
	store := testenv.Store(t, mysql.StoreConfig{}, 4)
	client := testenv.SQS(t)
	good := testenv.Queues(t, client, 30, 5)
	broken := good
	broken.URL = good.URL + "-does-not-exist" // every SendMessage fails
	sys := startSystem(t, broken, store, 200*time.Millisecond)

	status, m, err := postJSON(sys.URL + "/events/async")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
	id := int64(m["id"].(float64))
	testenv.Eventually(t, 20*time.Second, "the sweeper processed the event", func() bool {
		_, m := getJSON(t, fmt.Sprintf("%s/events/%d", sys.URL, id))
		return m["processedBy"] == "sweeper"
	})
}
