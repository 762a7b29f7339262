package groupcommit_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/groupcommit"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
)

// gate is a Run that records each batch, and holds the first one until released, so that a test
// can line callers up behind it. Its result for a request is the request doubled.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	entered chan struct{} // closed when the first batch runs
	release chan struct{} // closing it lets the first batch finish
	fail    error         // every batch after the first fails with it
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) run(ctx context.Context, batch []int) ([]int, error) {
	g.mu.Lock()
	first := len(g.batches) == 0
	g.batches = append(g.batches, slices.Clone(batch))
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.release
	} else if g.fail != nil {
		return nil, g.fail
	}
	out := make([]int, len(batch))
	for i, r := range batch {
		out[i] = 2 * r
	}
	return out, nil
}

func (g *gate) seen() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

type answer struct {
	req, res int
	err      error
}

// lineUp runs first alone in the gate's first batch, then the others, one by one in order, each
// queued behind it before the next starts; it returns the answers' channel once all wait.
func lineUp(t *testing.T, g *groupcommit.Group[int, int], gt *gate, ctx context.Context, first int, others ...int) chan answer {
	t.Helper()
	answers := make(chan answer, 1+len(others))
	do := func(ctx context.Context, r int) {
		res, err := g.Do(ctx, r)
		answers <- answer{r, res, err}
	}
	go do(context.Background(), first)
	<-gt.entered
	for i, r := range others {
		go do(ctx, r)
		testutil.Eventually(t, 10*time.Second, "the request waits", func() bool { return g.Waiting() == i+1 })
	}
	return answers
}

// A batch takes waiting requests in order while it stays within MaxRows and within MaxBytes: the
// bound reached first ends it, and a request larger than both still runs, alone.
func TestABatchIsBoundedByRowsAndByBytes(t *testing.T) {
	t.Parallel()
	gt := newGate()
	// A request r is r rows and 10*r bytes... except 100, which is 1 row and 1,000 bytes.
	g := &groupcommit.Group[int, int]{Run: gt.run, MaxRows: 5, MaxBytes: 60, Size: func(r int) (int, int) {
		if r == 100 {
			return 1, 1000
		}
		return r, 10 * r
	}}
	// Behind 0 (the held batch): {1, 2} (3 rows; with 3, 6 rows), {3, 1} (4 rows; with 2, 6 rows),
	// {2, 1, 1} (40 bytes; with 100, 5 rows, which fit, and 1,040 bytes, which do not), {100}
	// alone (over MaxBytes by itself), {4, 1} (5 rows, 50 bytes), {6} alone (over MaxRows).
	reqs := []int{1, 2, 3, 1, 2, 1, 1, 100, 4, 1, 6}
	answers := lineUp(t, g, gt, context.Background(), 0, reqs...)
	close(gt.release)
	for range 1 + len(reqs) {
		a := <-answers
		if a.err != nil || a.res != 2*a.req {
			t.Errorf("request %d: got %d, %v", a.req, a.res, a.err)
		}
	}
	want := [][]int{{0}, {1, 2}, {3, 1}, {2, 1, 1}, {100}, {4, 1}, {6}}
	if got := gt.seen(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// A caller whose context ends while its request waits returns at once with the context's error;
// its batch still runs, and the other callers in it get their results.
func TestACallerWhoseContextEndsWhileQueuedReturnsAndTheBatchRuns(t *testing.T) {
	t.Parallel()
	gt := newGate()
	g := &groupcommit.Group[int, int]{Run: gt.run}
	ctx, cancel := context.WithCancel(context.Background())
	answers := lineUp(t, g, gt, ctx, 1, 2)
	// 3 waits behind 2, on a context that does not end.
	late := make(chan answer, 1)
	go func() { res, err := g.Do(context.Background(), 3); late <- answer{3, res, err} }()
	testutil.Eventually(t, 10*time.Second, "3 waits", func() bool { return g.Waiting() == 2 })

	cancel()
	select {
	case a := <-answers:
		if a.req != 2 || !errors.Is(a.err, context.Canceled) {
			t.Fatalf("got %+v, want request 2 with context.Canceled", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller whose context ended still waits for its batch")
	}
	close(gt.release)
	if a := <-answers; a.req != 1 || a.err != nil || a.res != 2 {
		t.Fatalf("got %+v for request 1", a)
	}
	if a := <-late; a.err != nil || a.res != 6 {
		t.Fatalf("got %+v for request 3, which shares the batch of the one that gave up", a)
	}
	if got := gt.seen(); !slices.EqualFunc(got, [][]int{{1}, {2, 3}}, slices.Equal) {
		t.Fatalf("batches %v: the request of the caller that gave up still runs, in its batch", got)
	}
}

// A batch that fails fails every request in it with its error, and no other batch.
func TestAnErrorReachesEveryMemberOfItsBatch(t *testing.T) {
	t.Parallel()
	gt := newGate()
	gt.fail = errors.New("down")
	g := &groupcommit.Group[int, int]{Run: gt.run, MaxRows: 3}
	answers := lineUp(t, g, gt, context.Background(), 1, 2, 3, 4, 5)
	close(gt.release)
	got := map[int]error{}
	for range 5 {
		a := <-answers
		got[a.req] = a.err
	}
	if got[1] != nil {
		t.Errorf("request 1, of the batch that did not fail: %v", got[1])
	}
	for _, r := range []int{2, 3, 4, 5} {
		if !errors.Is(got[r], gt.fail) {
			t.Errorf("request %d of a failed batch: got %v, want its error", r, got[r])
		}
	}
	if got := gt.seen(); !slices.EqualFunc(got, [][]int{{1}, {2, 3, 4}, {5}}, slices.Equal) {
		t.Fatalf("batches %v", got)
	}
}

// Many callers at once, with several flushers: every caller gets its own result exactly once, no
// batch passes the bounds, no more than Flushers batches run at once, every request runs once, and
// none is left waiting with no flusher (a caller that queues just as the last flusher finds nothing
// and ends must start one).
func TestConcurrentCallersEachGetTheirOwnResult(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, most := 0, 0
	ran := map[int]int{}
	g := &groupcommit.Group[int, int]{MaxRows: 7, Flushers: 3, Run: func(ctx context.Context, batch []int) ([]int, error) {
		mu.Lock()
		running++
		most = max(most, running)
		for _, r := range batch {
			ran[r]++
		}
		mu.Unlock()
		if len(batch) > 7 {
			t.Errorf("a batch of %d", len(batch))
		}
		time.Sleep(time.Millisecond) // let callers pile up behind the batch
		out := make([]int, len(batch))
		for i, r := range batch {
			out[i] = r * r
		}
		mu.Lock()
		running--
		mu.Unlock()
		return out, nil
	}}
	const callers = 400
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range callers {
		wg.Go(func() {
			<-start
			res, err := g.Do(context.Background(), r)
			if err != nil || res != r*r {
				t.Errorf("request %d: got %d, %v", r, res, err)
			}
		})
	}
	close(start)
	waitAll(t, g, &wg)
	for r := range callers {
		if ran[r] != 1 {
			t.Errorf("request %d ran %d times", r, ran[r])
		}
	}
	if most > 3 {
		t.Errorf("%d batches ran at once; Flushers is 3", most)
	}
	if g.Waiting() != 0 {
		t.Errorf("%d requests left waiting", g.Waiting())
	}
}

// Inline, each request runs alone, in its caller's goroutine, on its caller's context bounded by
// Timeout.
func TestInlineRunsEachRequestAloneOnItsCallersContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	g := &groupcommit.Group[int, int]{Inline: true, Timeout: time.Minute,
		Run: func(ctx context.Context, batch []int) ([]int, error) {
			d, ok := ctx.Deadline()
			if len(batch) != 1 || ctx.Value(key{}) != "caller" || !ok || time.Until(d) > time.Minute {
				t.Errorf("batch %v, value %v, deadline %v %v", batch, ctx.Value(key{}), d, ok)
			}
			return []int{batch[0] + 1}, nil
		}}
	res, err := g.Do(context.WithValue(context.Background(), key{}, "caller"), 41)
	if err != nil || res != 42 {
		t.Fatalf("got %d, %v", res, err)
	}
}

// Callers that arrive one after another, each as the previous batch ends, meet the flusher just as
// it finds nothing waiting and ends: each must be served, by that flusher or by one it starts.
func TestCallersArrivingAsAFlusherEndsAreServed(t *testing.T) {
	t.Parallel()
	g := &groupcommit.Group[int, int]{Run: func(ctx context.Context, batch []int) ([]int, error) {
		return slices.Clone(batch), nil
	}}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if res, err := g.Do(context.Background(), w*10000+i); err != nil || res != w*10000+i {
					t.Errorf("got %d, %v", res, err)
					return
				}
			}
		})
	}
	waitAll(t, g, &wg)
}

// waitAll waits for the callers of wg, and fails if they still wait after a minute: a request left
// with no flusher would wait for ever.
func waitAll(t *testing.T, g *groupcommit.Group[int, int], wg *sync.WaitGroup) {
	t.Helper()
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(time.Minute):
		t.Fatalf("callers still wait a minute on (%d of them queued): a request was left with no flusher", g.Waiting())
	}
}

// Staged: the next batch starts once the batch running calls Release, while that batch still
// runs (its COMMIT), and not before: at most one batch is before its Release, and the callers that
// came meanwhile form one batch.
func TestStagedBatchStartsWhenTheOneBeforeReleases(t *testing.T) {
	t.Parallel()
	entered, released, finish := make(chan []int, 4), make(chan struct{}), make(chan struct{})
	g := &groupcommit.Group[int, int]{Staged: true, Flushers: 4, Run: func(ctx context.Context, batch []int) ([]int, error) {
		entered <- slices.Clone(batch)
		if batch[0] == 1 {
			<-released
			groupcommit.Release(ctx)
			groupcommit.Release(ctx) // a second call is a no-op
			<-finish
		}
		return slices.Clone(batch), nil
	}}
	answers := make(chan answer, 3)
	do := func(r int) {
		go func() {
			res, err := g.Do(context.Background(), r)
			answers <- answer{r, res, err}
		}()
	}
	do(1)
	if b := <-entered; !slices.Equal(b, []int{1}) {
		t.Fatalf("first batch %v", b)
	}
	do(2)
	do(3)
	testutil.Eventually(t, 10*time.Second, "two requests wait", func() bool { return g.Waiting() == 2 })
	select {
	case b := <-entered:
		t.Fatalf("batch %v started before the first released", b)
	default:
	}
	close(released)
	// The first batch is still running (it waits for finish): the second starts beside it.
	var b []int
	select {
	case b = <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no second batch while the first, released, still runs")
	}
	slices.Sort(b)
	if !slices.Equal(b, []int{2, 3}) {
		t.Fatalf("second batch %v, want [2 3]", b)
	}
	for range 2 {
		if a := <-answers; a.err != nil || a.res != a.req {
			t.Errorf("answer %+v", a)
		}
	}
	close(finish)
	if a := <-answers; a.req != 1 || a.err != nil || a.res != 1 {
		t.Errorf("answer %+v", a)
	}
}

// Staged, a batch that never calls Release holds its stage until its Run returns, as with one
// flusher; and Release on a context no Staged batch runs on does nothing.
func TestStagedBatchWithoutReleaseHoldsItsStage(t *testing.T) {
	t.Parallel()
	groupcommit.Release(context.Background())
	gt := newGate()
	g := &groupcommit.Group[int, int]{Staged: true, Flushers: 4, Run: gt.run}
	answers := lineUp(t, g, gt, context.Background(), 1, 2, 3)
	if got := gt.seen(); len(got) != 1 {
		t.Fatalf("batches %v while the first runs without a Release", got)
	}
	close(gt.release)
	for range 3 {
		if a := <-answers; a.err != nil || a.res != 2*a.req {
			t.Errorf("answer %+v", a)
		}
	}
	if got := gt.seen(); len(got) != 2 || !slices.Equal(got[1], []int{2, 3}) {
		t.Fatalf("batches %v", got)
	}
}

// Staged, under many callers: each gets its own result once, at most one batch is before its
// Release at any time, at most Flushers run at once, and none is left waiting.
func TestStagedConcurrentCallers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, first, most, mostFirst := 0, 0, 0, 0
	ran := map[int]int{}
	g := &groupcommit.Group[int, int]{MaxRows: 7, Flushers: 3, Staged: true}
	g.Run = func(ctx context.Context, batch []int) ([]int, error) {
		mu.Lock()
		running, first = running+1, first+1
		most, mostFirst = max(most, running), max(mostFirst, first)
		for _, r := range batch {
			ran[r]++
		}
		mu.Unlock()
		time.Sleep(200 * time.Microsecond) // let callers pile up behind the batch
		mu.Lock()
		first--
		mu.Unlock()
		if len(batch)%2 == 0 {
			groupcommit.Release(ctx) // some batches hold their stage to the end
		}
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return slices.Clone(batch), nil
	}
	const callers = 400
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range callers {
		wg.Go(func() {
			<-start
			if res, err := g.Do(context.Background(), r); err != nil || res != r {
				t.Errorf("request %d: got %d, %v", r, res, err)
			}
		})
	}
	close(start)
	waitAll(t, g, &wg)
	for r := range callers {
		if ran[r] != 1 {
			t.Errorf("request %d ran %d times", r, ran[r])
		}
	}
	if most > 3 || mostFirst > 1 {
		t.Errorf("%d batches at once, %d before their Release; want at most 3 and 1", most, mostFirst)
	}
	if g.Waiting() != 0 {
		t.Errorf("%d requests left waiting", g.Waiting())
	}
}

// Staged with ShareAt, a second batch enters the first stage beside the one there once ShareAt
// requests wait, not before; and no third batch enters while two are there, however many wait.
func TestStagedSecondBatchSharesTheFirstStageOnceShareAtWait(t *testing.T) {
	t.Parallel()
	entered, finish := make(chan []int, 8), make(chan struct{})
	g := &groupcommit.Group[int, int]{Staged: true, Flushers: 4, ShareAt: 3, Run: func(ctx context.Context, batch []int) ([]int, error) {
		entered <- slices.Clone(batch)
		<-finish // no Release: every batch holds the first stage until it returns
		return slices.Clone(batch), nil
	}}
	answers := make(chan answer, 10)
	do := func(r int) {
		go func() {
			res, err := g.Do(context.Background(), r)
			answers <- answer{r, res, err}
		}()
	}
	nothingEntered := func(why string) {
		t.Helper()
		select {
		case b := <-entered:
			t.Fatalf("batch %v entered %s", b, why)
		default:
		}
	}
	do(1)
	if b := <-entered; !slices.Equal(b, []int{1}) {
		t.Fatalf("first batch %v", b)
	}
	do(2)
	do(3)
	testutil.Eventually(t, 10*time.Second, "two requests wait", func() bool { return g.Waiting() == 2 })
	nothingEntered("with two waiting, fewer than ShareAt")
	do(4)
	var b []int
	select {
	case b = <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no second batch in the first stage with ShareAt requests waiting")
	}
	slices.Sort(b)
	if !slices.Equal(b, []int{2, 3, 4}) {
		t.Fatalf("second batch %v, want [2 3 4]", b)
	}
	for r := 5; r <= 8; r++ {
		do(r)
	}
	testutil.Eventually(t, 10*time.Second, "four requests wait", func() bool { return g.Waiting() == 4 })
	nothingEntered("while two batches are in the first stage")
	close(finish)
	for range 8 {
		if a := <-answers; a.err != nil || a.res != a.req {
			t.Errorf("answer %+v", a)
		}
	}
}

// Staged with ShareAt, under many callers: each gets its own result once, at most two batches are
// before their Release at any time, at most Flushers run at once, and none is left waiting.
func TestStagedSharedConcurrentCallers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, first, most, mostFirst := 0, 0, 0, 0
	ran := map[int]int{}
	g := &groupcommit.Group[int, int]{MaxRows: 7, Flushers: 3, Staged: true, ShareAt: 4}
	g.Run = func(ctx context.Context, batch []int) ([]int, error) {
		mu.Lock()
		running, first = running+1, first+1
		most, mostFirst = max(most, running), max(mostFirst, first)
		for _, r := range batch {
			ran[r]++
		}
		mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		mu.Lock()
		first--
		mu.Unlock()
		if len(batch)%2 == 0 {
			groupcommit.Release(ctx)
		}
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return slices.Clone(batch), nil
	}
	const callers = 400
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range callers {
		wg.Go(func() {
			<-start
			if res, err := g.Do(context.Background(), r); err != nil || res != r {
				t.Errorf("request %d: got %d, %v", r, res, err)
			}
		})
	}
	close(start)
	waitAll(t, g, &wg)
	for r := range callers {
		if ran[r] != 1 {
			t.Errorf("request %d ran %d times", r, ran[r])
		}
	}
	if most > 3 || mostFirst > 2 {
		t.Errorf("%d batches at once, %d before their Release; want at most 3 and 2", most, mostFirst)
	}
	if g.Waiting() != 0 {
		t.Errorf("%d requests left waiting", g.Waiting())
	}
}
