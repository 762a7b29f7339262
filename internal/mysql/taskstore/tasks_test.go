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
	"github.com/exactlyonce/exactlyonce/internal/testdb"
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
