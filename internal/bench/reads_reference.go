package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// sizedStore is one of the reads group's databases: its stores and how many events it holds.
type sizedStore struct {
	store *wire.Stores
	size  int64
}

// referenceReads measures what is bounded by a reference rather than by the history, on the
// reads group's two databases (10,000 and 10,000,000 events, packed):
//
//   - a reference's listing of its 20 tasks (GET /references/{id}/events: Store.ReferenceTasks), at
//     both sizes, in alternating rounds. The cell holding the reference's directory is filled as a
//     history of that many tasks would fill it (about 390 entries of other references at
//     10,000,000: mysqltest.FillDirectoryCell), so that the big database pays for a cell as full
//     as a history of tasks would leave it;
//   - on each database, a create of a task in a bucket (Store.CreateTasks, one client) while
//     another client retries a reference of the same bucket over and over (its 20 tasks failed by
//     hand, then Store.RetryReference), against the same create with no retry, in alternating
//     windows; in the same windows, in turn with those, a create in another bucket (what the
//     retries cost a create through the machine's load, not through a lock); and the retries' own
//     rate at both sizes;
//   - on the small database, a reference's retry of many failed tasks in parts, and a create in its
//     bucket during it against alone (bulkRetryInParts);
//   - on the big database, the count (Store.Count) with nothing unfolded, then right after a burst
//     of creates (100,000 in the full run) that no fold has reached.
func referenceReads(ctx context.Context, r *run, group string, small, big sizedStore) error {
	const tasks = 20
	for _, d := range []sizedStore{small, big} {
		batch := make([]exactlyonce.NewTask, tasks)
		for i := range batch {
			batch[i] = exactlyonce.NewTask{URL: "https://example.com/hook", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), ReferenceID: "listed", MaxRetries: 3}
		}
		if _, err := d.store.Tasks.CreateTasks(ctx, batch); err != nil {
			return err
		}
		slot, col := taskstore.DirectoryCell("listed")
		if err := mysqltest.FillDirectoryCell(ctx, d.store.DB.Pool(), slot, col, int(d.size/25_600)); err != nil {
			return err
		}
	}
	rounds, per := pick(r, 6, 2), pick(r, 50, 5)
	took := map[int64]time.Duration{}
	for round := range rounds {
		order := []sizedStore{small, big}
		if round%2 == 1 {
			order = []sizedStore{big, small}
		}
		for _, d := range order {
			t0 := time.Now()
			for range per {
				got, err := d.store.Tasks.ReferenceTasks(ctx, "listed", 0, tasks)
				if err != nil {
					return err
				}
				if len(got) != tasks {
					return fmt.Errorf("the listing of %d tasks answered %d", tasks, len(got))
				}
			}
			took[d.size] += time.Since(t0)
		}
	}
	listRow := func(d sizedStore) Row {
		mean := took[d.size] / time.Duration(rounds*per)
		return Row{Group: group, Name: fmt.Sprintf("reads_reference_list%d_%d_per_s", tasks, d.size), Value: float64(time.Second) / float64(mean),
			Unit: "listings/s", Note: fmt.Sprintf("GET /references/{id}/events of a reference's %d tasks (Store.ReferenceTasks), %d events, mean %.2f ms", tasks, d.size, float64(mean.Microseconds())/1000)}
	}
	bigRow, smallRow := listRow(big), listRow(small)
	r.add(smallRow, bigRow, ratio(group, "reads_reference_list_big_vs_small", bigRow, smallRow, atLeast(0.8),
		fmt.Sprintf("a reference's listing of %d tasks with %d events against %d", tasks, big.size, small.size)))
	r.progress(group, "listing of %d tasks: %.0f/s with %d events, %.0f/s with %d", tasks, smallRow.Value, small.size, bigRow.Value, big.size)

	retrySmall, err := createDuringRetry(ctx, r, group, small)
	if err != nil {
		return err
	}
	retryBig, err := createDuringRetry(ctx, r, group, big)
	if err != nil {
		return err
	}
	if err := bulkRetryInParts(ctx, r, group, small); err != nil {
		return err
	}
	r.add(ratio(group, "reads_retry_reference_big_vs_small", retryBig, retrySmall, atLeast(0.8),
		fmt.Sprintf("a reference's retry of its 20 failed tasks with %d events against %d", big.size, small.size)))
	return countAfterBurst(ctx, r, group, big, pick(r, 100_000, 2_000))
}

// createDuringRetry measures a create in a bucket while a reference of that bucket is retried over
// and over, against the create alone (see referenceReads), and returns the retries' rate.
func createDuringRetry(ctx context.Context, r *run, group string, d sizedStore) (Row, error) {
	const retried = "retried"
	bucket := taskstore.ReferenceHash(retried) % 64
	// References of the retried one's bucket that the creates take turns with: their first tasks
	// head them, the others queue, so that `open` (which a create reads for its references' heads)
	// holds a head per reference, not every task created.
	var refs []string
	for i := 0; len(refs) < 8; i++ {
		if ref := fmt.Sprintf("create-%d", i); taskstore.ReferenceHash(ref)%64 == bucket {
			refs = append(refs, ref)
		}
	}
	// And 8 references of other buckets, which the client creates in every other time: a create
	// outside the bucket pays what the retries cost the machine (its CPU, on this 2-core one) but
	// no lock of theirs, so the two side by side, in the same windows, tell the retry's lock apart
	// from the machine's load.
	var outside []string
	for i := 0; len(outside) < 8; i++ {
		if ref := fmt.Sprintf("outside-%d", i); taskstore.ReferenceHash(ref)%64 != bucket {
			outside = append(outside, ref)
		}
	}
	batch := make([]exactlyonce.NewTask, 20)
	for i := range batch {
		batch[i] = exactlyonce.NewTask{URL: "https://example.com/hook", Payload: []byte(`{}`), ReferenceID: retried, MaxRetries: 3}
	}
	created, err := d.store.Tasks.CreateTasks(ctx, batch)
	if err != nil {
		return Row{}, err
	}
	ids := make([]any, len(created))
	marks := ""
	for i, c := range created {
		ids[i] = c.ID
		marks += "?,"
	}
	failAll := "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id IN (" + marks[:len(marks)-1] + ")"
	pool := d.store.DB.Pool()

	windows, window := pick(r, 6, 2), pick(r, 2*time.Second, 300*time.Millisecond)
	var next atomic.Int64
	// create creates until until, in the bucket and outside it in turn, and returns the time and
	// number of each.
	create := func(until time.Time) (in, out time.Duration, nIn, nOut int, err error) {
		for time.Now().Before(until) {
			k := int(next.Add(1))
			ref := refs[k/2%len(refs)]
			if k%2 == 1 {
				ref = outside[k/2%len(outside)]
			}
			t0 := time.Now()
			if _, err := d.store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: "https://example.com/hook", Payload: []byte(`{}`), ReferenceID: ref, MaxRetries: 3}}); err != nil {
				return 0, 0, 0, 0, err
			}
			if k%2 == 1 {
				out, nOut = out+time.Since(t0), nOut+1
			} else {
				in, nIn = in+time.Since(t0), nIn+1
			}
		}
		return in, out, nIn, nOut, nil
	}
	var alone, during, outsideDuring, retrying time.Duration
	var nAlone, nDuring, nOutside, nRetries int
	for w := range 2 * windows {
		until := time.Now().Add(window)
		if w%2 == 0 {
			took, _, n, _, err := create(until)
			if err != nil {
				return Row{}, err
			}
			alone, nAlone = alone+took, nAlone+n
			continue
		}
		var wg sync.WaitGroup
		var retryErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				if _, err := pool.ExecContext(ctx, failAll, ids...); err != nil {
					retryErr = err
					return
				}
				t0 := time.Now()
				got, err := d.store.Tasks.RetryReference(ctx, retried)
				if err == nil && len(got.IDs) != len(ids) {
					err = fmt.Errorf("the retry of a reference with %d failed tasks retried %d", len(ids), len(got.IDs))
				}
				if err != nil {
					retryErr = err
					return
				}
				retrying += time.Since(t0)
				nRetries++
			}
		}()
		took, tookOutside, n, nOut, err := create(until)
		wg.Wait()
		if err != nil {
			return Row{}, err
		}
		if retryErr != nil {
			return Row{}, retryErr
		}
		during, nDuring = during+took, nDuring+n
		outsideDuring, nOutside = outsideDuring+tookOutside, nOutside+nOut
	}
	if nAlone == 0 || nDuring == 0 || nOutside == 0 || nRetries == 0 {
		return Row{}, fmt.Errorf("create during a retry: %d creates alone, %d during %d retries", nAlone, nDuring, nRetries)
	}
	meanAlone, meanDuring := alone/time.Duration(nAlone), during/time.Duration(nDuring)
	aloneRow := Row{Group: group, Name: fmt.Sprintf("reads_create_alone_%d_per_s", d.size), Value: float64(time.Second) / float64(meanAlone),
		Unit: "creates/s", Note: fmt.Sprintf("Store.CreateTasks of one task, one client, %d events, mean %.2f ms", d.size, float64(meanAlone.Microseconds())/1000)}
	duringRow := Row{Group: group, Name: fmt.Sprintf("reads_create_during_retry_%d_per_s", d.size), Value: float64(time.Second) / float64(meanDuring),
		Unit: "creates/s", Note: fmt.Sprintf("the same create in the bucket of a reference retried over and over (20 failed tasks, Store.RetryReference: mean %.2f ms), mean %.2f ms",
			float64((retrying/time.Duration(nRetries)).Microseconds())/1000, float64(meanDuring.Microseconds())/1000)}
	meanOutside := outsideDuring / time.Duration(nOutside)
	outsideRow := Row{Group: group, Name: fmt.Sprintf("reads_create_outside_during_retry_%d_per_s", d.size), Value: float64(time.Second) / float64(meanOutside),
		Unit: "creates/s", Note: fmt.Sprintf("a create in another bucket, in turn with the creates in the retried one, in the same windows, mean %.2f ms", float64(meanOutside.Microseconds())/1000)}
	r.add(aloneRow, duringRow, ratio(group, fmt.Sprintf("reads_create_during_retry_vs_alone_%d", d.size), duringRow, aloneRow, atLeast(0.8),
		fmt.Sprintf("a create in a bucket while a reference of it is retried, against the create alone, %d events", d.size)),
		outsideRow, ratio(group, fmt.Sprintf("reads_create_during_retry_in_vs_outside_bucket_%d", d.size), duringRow, outsideRow, nil,
			fmt.Sprintf("during the retries, a create in their bucket against one outside it: what the retry's lock costs a create, the machine's load aside, %d events", d.size)))
	meanRetry := retrying / time.Duration(nRetries)
	retryRow := Row{Group: group, Name: fmt.Sprintf("reads_retry_reference_%d_per_s", d.size), Value: float64(time.Second) / float64(meanRetry),
		Unit: "retries/s", Note: fmt.Sprintf("Store.RetryReference of a reference's 20 failed tasks, beside a client creating in its bucket, %d events, mean %.2f ms", d.size, float64(meanRetry.Microseconds())/1000)}
	r.add(retryRow)
	r.progress(group, "with %d events, a create in a bucket: %.2f ms alone, %.2f ms during retries of a reference in it (%d retries, %.2f ms each), %.2f ms outside the bucket during them",
		d.size, float64(meanAlone.Microseconds())/1000, float64(meanDuring.Microseconds())/1000, nRetries, float64(meanRetry.Microseconds())/1000, float64(meanOutside.Microseconds())/1000)
	return retryRow, nil
}

// countAfterBurst measures the count with nothing unfolded, then right after a burst of n creates
// that no fold has reached (see referenceReads).
func countAfterBurst(ctx context.Context, r *run, group string, d sizedStore, n int) error {
	for {
		moved, err := d.store.Events.FoldSettled(ctx, eventstore.DefaultFoldBatch)
		if err != nil {
			return err
		}
		if moved == 0 {
			break
		}
	}
	reps := pick(r, 50, 5)
	mean := func() (time.Duration, int64, error) {
		t0 := time.Now()
		var c int64
		for range reps {
			var err error
			if c, err = d.store.Events.Count(ctx); err != nil {
				return 0, 0, err
			}
		}
		return time.Since(t0) / time.Duration(reps), c, nil
	}
	folded, before, err := mean()
	if err != nil {
		return err
	}
	for done := 0; done < n; done += eventstore.MaxPendingBatch {
		if _, err := d.store.Events.CreatePendingBatch(ctx, min(eventstore.MaxPendingBatch, n-done)); err != nil {
			return err
		}
	}
	burst, after, err := mean()
	if err != nil {
		return err
	}
	r.check(group, fmt.Sprintf("the count after a burst of %d creates is exact", n), after == before+int64(n),
		fmt.Sprintf("%d before, %d after", before, after))
	foldedRow := Row{Group: group, Name: fmt.Sprintf("reads_count_folded_%d_per_s", d.size), Value: float64(time.Second) / float64(folded),
		Unit: "counts/s", Note: fmt.Sprintf("GET /events: Store.Count with nothing unfolded, %d events, mean %.2f ms", d.size, float64(folded.Microseconds())/1000)}
	burstRow := Row{Group: group, Name: fmt.Sprintf("reads_count_after_burst_%d_per_s", n), Value: float64(time.Second) / float64(burst),
		Unit: "counts/s", Note: fmt.Sprintf("Store.Count right after %d creates no fold has reached, mean %.2f ms", n, float64(burst.Microseconds())/1000)}
	r.add(foldedRow, burstRow, ratio(group, "reads_count_after_burst_vs_folded", burstRow, foldedRow, atLeast(0.8),
		fmt.Sprintf("the count right after a burst of %d unfolded creates, against nothing unfolded", n)))
	r.progress(group, "count: %.2f ms with nothing unfolded, %.2f ms after %d unfolded creates", float64(folded.Microseconds())/1000, float64(burst.Microseconds())/1000, n)
	return nil
}

// bulkRetryInParts measures a reference's retry of many failed tasks (20,000; 2,000 in the smoke
// run: a receiver down for long, with maxRetries 0), which goes in parts of 500 (Store.RetryReference,
// called again while it answers More): the time per part, and a create in the reference's bucket
// while the retry runs, against the same create alone (one client, 8 references of the bucket in
// turn). Before parts, the retry was one transaction holding the bucket throughout.
func bulkRetryInParts(ctx context.Context, r *run, group string, d sizedStore) error {
	const ref = "bulk"
	n := pick(r, 20_000, 2_000)
	ids, err := mysqltest.FailedReferenceTasks(ctx, d.store.DB.Pool(), d.store.Tasks, "https://example.com/hook", ref, n)
	if err != nil {
		return err
	}
	bucket := taskstore.ReferenceHash(ref) % 64
	var neighbours []string
	for i := 0; len(neighbours) < 8; i++ {
		if nb := fmt.Sprintf("bulk-neighbour-%d", i); taskstore.ReferenceHash(nb)%64 == bucket {
			neighbours = append(neighbours, nb)
		}
	}
	k := 0
	create := func() (time.Duration, error) {
		k++
		t0 := time.Now()
		_, err := d.store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: "https://example.com/hook", Payload: []byte(`{}`), ReferenceID: neighbours[k%len(neighbours)], MaxRetries: 3}})
		return time.Since(t0), err
	}
	var alone time.Duration
	nAlone := 0
	for until := time.Now().Add(pick(r, 2*time.Second, 300*time.Millisecond)); time.Now().Before(until); nAlone++ {
		took, err := create()
		if err != nil {
			return err
		}
		alone += took
	}
	done := make(chan struct{})
	var retried []int64
	var retryErr error
	calls := 0
	var firstCall time.Duration
	firstIDs := 0
	t0 := time.Now()
	go func() {
		defer close(done)
		for {
			calls++
			c0 := time.Now()
			got, err := d.store.Tasks.RetryReference(ctx, ref)
			if err != nil {
				retryErr = err
				return
			}
			if calls == 1 {
				firstCall, firstIDs = time.Since(c0), len(got.IDs)
			}
			retried = append(retried, got.IDs...)
			if !got.More {
				return
			}
		}
	}()
	var during time.Duration
	nDuring := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			took, err := create()
			if err != nil {
				<-done
				return err
			}
			during, nDuring = during+took, nDuring+1
		}
	}
	total := time.Since(t0)
	if retryErr != nil {
		return retryErr
	}
	if len(retried) != len(ids) {
		return fmt.Errorf("the retry in parts of %d failed tasks retried %d", len(ids), len(retried))
	}
	for i := range ids {
		if retried[i] != ids[i] {
			return fmt.Errorf("the retry in parts retried %d at %d, not %d: out of order", retried[i], i, ids[i])
		}
	}
	if nAlone == 0 || nDuring == 0 {
		return fmt.Errorf("bulk retry: %d creates alone, %d during it", nAlone, nDuring)
	}
	parts := (n + 499) / 500
	perPart := total / time.Duration(parts)
	partRow := Row{Group: group, Name: fmt.Sprintf("reads_bulk_retry_%d_ms_per_part", n), Value: float64(perPart.Microseconds()) / 1000, Unit: "ms",
		Note: fmt.Sprintf("Store.RetryReference of a reference's %d failed tasks, in %d parts of 500, %d calls, %.2f s in all, beside a client creating in its bucket, %d events",
			n, parts, calls, total.Seconds(), d.size)}
	meanAlone, meanDuring := alone/time.Duration(nAlone), during/time.Duration(nDuring)
	aloneRow := Row{Group: group, Name: "reads_create_alone_before_bulk_retry_per_s", Value: float64(time.Second) / float64(meanAlone), Unit: "creates/s",
		Note: fmt.Sprintf("Store.CreateTasks of one task in the bucket of the reference about to be retried, one client, mean %.2f ms", float64(meanAlone.Microseconds())/1000)}
	duringRow := Row{Group: group, Name: "reads_create_during_bulk_retry_per_s", Value: float64(time.Second) / float64(meanDuring), Unit: "creates/s",
		Note: fmt.Sprintf("the same create while the reference's %d failed tasks are retried in parts, mean %.2f ms", n, float64(meanDuring.Microseconds())/1000)}
	// The first call's first part decides for all the failed tasks ("has a later task started?"),
	// the part that grew with the reference's tasks until it stopped asking about those its read
	// found failed: the tasks the first call retries within its 5 s.
	firstRow := Row{Group: group, Name: fmt.Sprintf("reads_bulk_retry_%d_first_call_tasks_per_s", n), Value: float64(firstIDs) / firstCall.Seconds(), Unit: "tasks/s",
		Note: fmt.Sprintf("the first Store.RetryReference call of the %d failed tasks: %d retried in %.2f s (its first part decides for all of them)", n, firstIDs, firstCall.Seconds())}
	r.add(partRow, firstRow, aloneRow, duringRow, ratio(group, "reads_create_during_bulk_retry_vs_alone", duringRow, aloneRow, nil,
		fmt.Sprintf("a create in a bucket while a reference of it with %d failed tasks is retried in parts, against the create alone", n)))
	r.progress(group, "a retry of %d failed tasks in parts: %.1f ms a part, %.2f s in all (%d calls); a create in its bucket %.2f ms during it, %.2f ms alone",
		n, float64(perPart.Microseconds())/1000, total.Seconds(), calls, float64(meanDuring.Microseconds())/1000, float64(meanAlone.Microseconds())/1000)
	return nil
}
