package taskstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Concurrent creates share transactions (group commit): each reference's tasks still take positions
// in the order their creates were answered, exactly the first of each is its head, and a create the
// database refuses (a url longer than its column) fails alone, whichever calls shared its
// transaction.
func TestConcurrentTaskCreatesKeepOrderAndFailAlone(t *testing.T) {
	t.Parallel()
	const clients, perRef = 32, 12
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	task := func(ref string, i int) exactlyonce.NewTask {
		return exactlyonce.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(fmt.Sprint(i)), ReferenceID: ref, MaxRetries: 3}
	}
	var wg sync.WaitGroup
	created := make([][]exactlyonce.CreatedTask, clients)
	errs := make([]error, clients)
	badErrs := make([]error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := fmt.Sprint("ref-", c)
			for i := range perRef {
				if c%4 == 0 && i == perRef/2 {
					// Refused by the database (url is VARBINARY(2048), migration 0015), in the middle of the run, by a
					// quarter of the clients, so that it shares transactions with good creates.
					bad := task(ref, -1)
					bad.URL = "https://example.com/" + strings.Repeat("x", 3000)
					_, badErrs[c] = store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{bad})
				}
				out, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{task(ref, i)})
				if err != nil {
					errs[c] = err
					return
				}
				created[c] = append(created[c], out...)
			}
		}()
	}
	wg.Wait()
	for c := range clients {
		require.NoError(t, errs[c], "client %d: a good create failed", c)
		if c%4 == 0 {
			require.Error(t, badErrs[c], "client %d: the overlong url was stored", c)
		}
		ref := fmt.Sprint("ref-", c)
		listed, err := store.Tasks.ReferenceTasks(ctx, ref, 0, 100)
		require.NoError(t, err)
		require.Len(t, listed, perRef, "reference %s holds only its good tasks", ref)
		for i, e := range listed {
			require.Equal(t, created[c][i].ID, e.ID, "reference %s: task %d out of place", ref, i)
			require.Equal(t, i == 0, created[c][i].Head, "reference %s: task %d head?", ref, i)
		}
	}
}

// The calls waiting for a shared transaction are grouped by their payloads' bytes as well as by
// their tasks: two calls of 20 tasks of 256 KiB (5 MiB each) wait behind a held transaction and
// take one each (8 MiB at most), though their 40 tasks would fit the 200 of one; two calls of one
// small task behind them join the second. Every task is stored.
func TestTaskCreateGroupsAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := taskstore.New(testdb.Core(t, mysql.Config{}, 4))
	entered, hold := make(chan struct{}), make(chan struct{})
	groups, waiting := taskstore.WatchCreateGroups(store, entered, hold)
	big := make([]exactlyonce.NewTask, 20)
	for i := range big {
		big[i] = exactlyonce.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(`"` + strings.Repeat("x", exactlyonce.MaxTaskPayloadBytes-2) + `"`)}
	}
	small := []exactlyonce.NewTask{{URL: "https://example.com/hook", Payload: json.RawMessage(`1`)}}
	errs := make(chan error, 5)
	create := func(tasks []exactlyonce.NewTask) {
		out, err := store.CreateTasks(ctx, tasks)
		if err == nil && len(out) != len(tasks) {
			err = fmt.Errorf("%d created of %d", len(out), len(tasks))
		}
		errs <- err
	}
	go create(small)
	<-entered
	go create(big)
	testutil.Eventually(t, 10*time.Second, "the first big call waits", func() bool { return waiting() == 1 })
	go create(big)
	testutil.Eventually(t, 10*time.Second, "the second big call waits", func() bool { return waiting() == 2 })
	for i := range 2 {
		go create(small)
		testutil.Eventually(t, 10*time.Second, "a small call waits", func() bool { return waiting() == 3+i })
	}
	close(hold)
	for range 5 {
		require.NoError(t, <-errs)
	}
	// Held small, then the first big alone (both bigs are 10 MiB), then the second with the smalls.
	require.Equal(t, []int{1, 1, 3}, groups())
}
