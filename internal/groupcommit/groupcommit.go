// Package groupcommit shares one round of work among the concurrent callers that arrive while an
// earlier round runs, the way a database groups the commits of concurrent transactions. It is how
// the API stores plain creates (internal/api/group.go) and keyed creates (internal/api/
// idempotency.go), and how the task store stores task creates (internal/mysql/taskstore): one
// transaction for many callers, each with its own answer.
//
// There is no timer. A caller that finds a free flusher starts one, and its request is run at once,
// alone: an idle process adds no latency. The callers that arrive while a batch runs wait, and the
// flusher takes them into the next batch, as many as the bounds allow, until none waits; then it
// ends. A flusher serves many callers, so it runs on a context of its own (Context, Timeout), never
// on a caller's: a caller that gives up returns at once, and the batch it joined still runs for the
// others (its request may still take effect, as with a transaction whose commit's answer is lost).
//
// The standard library only.
package groupcommit

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Group runs the requests of concurrent callers in shared batches. Set its fields before the first
// Do, and do not change them after; the zero value of every field but Run is usable. Safe for
// concurrent use.
type Group[Req, Res any] struct {
	// Run runs one batch, in the order the callers arrived, and returns one result per request, in
	// that order. An error fails every request of the batch with it (a result of its own per
	// request, where a request can fail alone, goes in Res).
	Run func(ctx context.Context, batch []Req) ([]Res, error)

	// MaxRows bounds a batch's rows, and MaxBytes its bytes, as Size counts them; 0 is no bound. A
	// batch always takes the first waiting request, whatever its size: a request larger than the
	// bounds runs alone.
	MaxRows, MaxBytes int
	// Size returns a request's rows and bytes. Nil: one row, no bytes.
	Size func(Req) (rows, bytes int)

	// Flushers is the most batches running at once. Default 1: every caller that arrives while a
	// batch runs joins the next one.
	Flushers int

	// Staged lets batches overlap in their last stage only: at most one batch at a time is before
	// the point where its Run calls Release on its context (a transaction's statements, before its
	// COMMIT), and up to Flushers batches run at once in all. A batch that never calls Release
	// holds the first stage until its Run returns. So the next batch gathers and runs its
	// statements while the one before waits for its commit (the database's log flush, which
	// concurrent commits share), instead of after it; and batches stay as large as with one
	// flusher, where free-running flushers would split the callers into smaller batches.
	Staged bool

	// ShareAt, when positive with Staged, lets a second batch into the first stage beside the one
	// there once at least ShareAt requests wait (and Flushers allows): a batch of that many pays
	// for its statements as well as one taken when the stage frees, and its callers no longer wait
	// for the statements of a batch they are not in. At most two batches are in the first stage.
	// Zero: one at a time.
	ShareAt int

	// Timeout, when positive, bounds each batch's Run.
	Timeout time.Duration
	// Context returns the context a flusher's batch runs on (Timeout is added to it). Nil:
	// context.Background(). It must not be a caller's: the batch serves others.
	Context func() context.Context

	// Inline runs each request alone, in its caller's goroutine, on the caller's context (with
	// Timeout): no batch, no flusher, nothing left running when Do returns. A Lambda execution
	// environment, frozen as soon as its answer is returned, needs this.
	Inline bool

	mu      sync.Mutex
	waiting []*call[Req, Res]
	active  int // flushers running
	first   int // flushers taking a batch or running one that has not called Release
}

// stage is a batch's first stage, ended once by Release or by its Run's return.
type stage[Req, Res any] struct {
	g    *Group[Req, Res]
	once sync.Once
}

// stageKey is the context key of a Staged batch's stage.
type stageKey struct{}

// releaser is what Release finds on a context.
type releaser interface{ release() }

// Release tells the Staged group whose batch runs on ctx that the batch is past its first stage:
// the next batch may start. Safe to call more than once, and a no-op on any other context (a group
// that is not Staged, an Inline request, no group at all).
func Release(ctx context.Context) {
	if r, ok := ctx.Value(stageKey{}).(releaser); ok {
		r.release()
	}
}

func (s *stage[Req, Res]) release() {
	s.once.Do(func() {
		g := s.g
		g.mu.Lock()
		g.first--
		if g.Staged && g.canStart() {
			g.active++
			g.first++
			go g.flush()
		}
		g.mu.Unlock()
	})
}

// call is one caller's request waiting for its batch; done is closed once res or err is set.
type call[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{}
}

// Do runs req in a batch and returns its result. If ctx ends first, Do returns ctx.Err() at once;
// the request stays in its batch, which still runs.
func (g *Group[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	if g.Inline {
		if g.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, g.Timeout)
			defer cancel()
		}
		c := &call[Req, Res]{req: req, done: make(chan struct{})}
		g.run(ctx, []*call[Req, Res]{c})
		return c.res, c.err
	}
	c := &call[Req, Res]{req: req, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	if g.canStart() {
		g.active++
		g.first++
		go g.flush()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
}

// Waiting returns how many requests wait for a batch (not those of a batch running).
func (g *Group[Req, Res]) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// flush runs what waits, a batch at a time, until nothing does. It ends when nothing waits, and the
// callers it serves wait for it, so it never outlives them (unless they give up). It starts counted
// in active and first; Staged, it takes another batch only while no other flusher is in its first
// stage (that one takes what waits).
func (g *Group[Req, Res]) flush() {
	for {
		g.mu.Lock()
		n := g.fits()
		if n == 0 {
			g.active--
			g.first--
			g.mu.Unlock()
			return
		}
		batch := g.waiting[:n:n]
		g.waiting = g.waiting[n:]
		g.mu.Unlock()
		ctx := context.Background()
		if g.Context != nil {
			ctx = g.Context()
		}
		cancel := context.CancelFunc(func() {})
		if g.Timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, g.Timeout)
		}
		st := &stage[Req, Res]{g: g}
		if g.Staged {
			ctx = context.WithValue(ctx, stageKey{}, releaser(st))
		}
		g.run(ctx, batch)
		cancel()
		st.release()
		g.mu.Lock()
		if g.Staged && !g.mayEnterFirst() {
			// Another flusher is in its first stage: it takes what waits.
			g.active--
			g.mu.Unlock()
			return
		}
		g.first++
		g.mu.Unlock()
	}
}

// canStart says whether a new flusher may start: something waits, Flushers allows one more, and,
// Staged, the first stage takes another batch. g.mu is held.
func (g *Group[Req, Res]) canStart() bool {
	return len(g.waiting) > 0 && g.active < max(g.Flushers, 1) && (!g.Staged || g.mayEnterFirst())
}

// mayEnterFirst says whether a Staged batch may enter the first stage now: none is there, or one
// is and ShareAt requests wait. g.mu is held.
func (g *Group[Req, Res]) mayEnterFirst() bool {
	return g.first == 0 || g.ShareAt > 0 && g.first < 2 && len(g.waiting) >= g.ShareAt
}

// fits returns how many of the waiting requests the next batch takes: the first, and those after
// it while the batch stays within MaxRows and MaxBytes. g.mu is held.
func (g *Group[Req, Res]) fits() int {
	n, rows, size := 0, 0, 0
	for n < len(g.waiting) {
		r, b := 1, 0
		if g.Size != nil {
			r, b = g.Size(g.waiting[n].req)
		}
		if n > 0 && (g.MaxRows > 0 && rows+r > g.MaxRows || g.MaxBytes > 0 && size+b > g.MaxBytes) {
			break
		}
		n, rows, size = n+1, rows+r, size+b
	}
	return n
}

// run runs one batch and hands each of its callers its result, or the batch's error.
func (g *Group[Req, Res]) run(ctx context.Context, batch []*call[Req, Res]) {
	reqs := make([]Req, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	results, err := g.Run(ctx, reqs)
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("groupcommit: %d results for a batch of %d", len(results), len(batch))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = results[i]
		}
		close(c.done)
	}
}
