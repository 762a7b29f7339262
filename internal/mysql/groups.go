package mysql

import (
	"context"
	"database/sql/driver"
	"slices"
	"strings"
	"sync"
	"time"
)

// countSlots is the number of rows the count is spread over: the slots 0..countSlots-1 that
// migration 0005 creates. A create adds its events to the slot of its first id. Changing it takes a
// migration that creates the new slots before the code uses them: an update of a slot that does
// not exist would lose its events from the count.
const countSlots = 32

// slotOf returns the count's slot for a create whose first id is id. Ids are positive.
func slotOf(id int64) int64 { return id % countSlots }

// newEvents is what one create stores: one processed event with *value, or len(ids) pending events
// (value nil).
type newEvents struct {
	ids   []int64
	value *string
}

// sqlBytes estimates the bytes e adds to a statement once its arguments are interpolated: an id,
// and for a processed event its value, escaped in the worst case.
func (e *newEvents) sqlBytes() int {
	if e.value != nil {
		return 64 + 2*len(*e.value)
	}
	return 32 * len(e.ids)
}

// inserts returns the INSERTs that store the events of creates, separated by semicolons (one per
// kind of event present: InsertProcessedRows, InsertPendingRows), and their arguments.
func inserts(creates []*newEvents) (string, []any) {
	var (
		stmts     []string
		processed []any
		pending   []int64
	)
	for _, e := range creates {
		if e.value != nil {
			processed = append(processed, e.ids[0], *e.value)
		} else {
			pending = append(pending, e.ids...)
		}
	}
	args := processed
	if n := len(processed) / 2; n > 0 {
		rows := strings.TrimSuffix(strings.Repeat("(?, ?, 10, NOW(6), NOW(6), 'api', 1), ", n), ", ")
		stmts = append(stmts, strings.Replace(query("InsertProcessedRows"), "/*rows*/", rows, 1))
	}
	if len(pending) > 0 {
		q, ids := expandRows(query("InsertPendingRows"), "(?, NULL, 0, NOW(6))", pending)
		stmts = append(stmts, q)
		args = append(args, ids...)
	}
	return strings.Join(stmts, ";\n"), args
}

// countedWrites returns inserts followed by the AddCount that counts their events, in the slot of
// the first create's first id, and the arguments of both: to run in one transaction.
func countedWrites(creates []*newEvents) (string, []any) {
	q, args := inserts(creates)
	n := 0
	for _, e := range creates {
		n += len(e.ids)
	}
	return q + ";\n" + query("AddCount"), append(args, n, slotOf(creates[0].ids[0]))
}

// maxGroupBytes bounds the SQL text of one group, under the 16 KB beyond which RDS Proxy pins a
// session. A single create is always written, whatever its size (MaxPendingBatch keeps it under).
const maxGroupBytes = 12 << 10

// groupTimeout bounds the write of a group of several creates: it serves every caller in it, so it
// does not end when the one who writes it goes away.
const groupTimeout = 10 * time.Second

// writeGroups writes the creates of one process a group at a time, the way a database groups the
// commits of concurrent transactions: the creates that arrive while a group is being written wait,
// and the first of them then writes them all, in one transaction and one round trip (CountedWrite),
// so that the count's UPDATE, the transaction and the INSERTs are shared by the group. There is no
// timer and nothing runs in the background: a create that finds no group being written writes
// itself at once, alone, and a caller only ever writes a group that holds its own create, in its
// own goroutine, before it returns. On Lambda, where an execution environment serves one request at
// a time, every group is one create. Each create gets its own ids; a group's error is the error of
// every create in it.
type writeGroups struct {
	mu      sync.Mutex
	queue   []*groupMember // creates waiting, in arrival order
	writing bool           // a group is being written; while it is, an empty queue may grow
}

// groupMember is one create in writeGroups. The flags change under writeGroups.mu; wake only says
// that one of them may have.
type groupMember struct {
	events *newEvents
	wake   chan struct{} // buffered: the member leads the next group, or its group is written
	lead   bool          // the member writes the next group
	done   bool          // its group was written, with err
	err    error
}

// write stores e, in a group, and returns when the group is committed or failed, or ctx ends (then
// e may still be stored: the caller cannot know).
func (g *writeGroups) write(ctx context.Context, s *Store, e *newEvents) error {
	m := &groupMember{events: e, wake: make(chan struct{}, 1)}
	g.mu.Lock()
	if !g.writing {
		// Nothing is being written, so nothing waits: write at once, alone, on the caller's context.
		g.writing = true
		g.mu.Unlock()
		return g.lead(ctx, s, []*groupMember{m})
	}
	g.queue = append(g.queue, m)
	g.mu.Unlock()
	select {
	case <-m.wake:
	case <-ctx.Done():
	}
	g.mu.Lock()
	switch {
	case m.done:
		g.mu.Unlock()
		return m.err
	case m.lead && ctx.Err() == nil:
		group := g.takeLocked() // m is the first in the queue, so in the group
		g.mu.Unlock()
		return g.lead(ctx, s, group)
	case m.lead:
		// Chosen to lead, but its caller went away first: the next in line leads instead.
		g.queue = g.queue[1:]
		g.promoteLocked()
		g.mu.Unlock()
		return ctx.Err()
	default:
		// ctx ended while waiting: leave the queue, or, if a group holding m is being written, leave
		// it to finish without m's caller.
		if i := slices.Index(g.queue, m); i >= 0 {
			g.queue = slices.Delete(g.queue, i, i+1)
		}
		g.mu.Unlock()
		return ctx.Err()
	}
}

// takeLocked takes the next group from the head of the queue: as many creates as fit in
// maxGroupBytes, and at least one.
func (g *writeGroups) takeLocked() []*groupMember {
	n, size := 0, 0
	for n < len(g.queue) && (n == 0 || size+g.queue[n].events.sqlBytes() <= maxGroupBytes) {
		size += g.queue[n].events.sqlBytes()
		n++
	}
	group := g.queue[:n:n]
	g.queue = g.queue[n:]
	return group
}

// promoteLocked hands the writing of the next group to the first create waiting, or, if none is,
// records that nothing is being written.
func (g *writeGroups) promoteLocked() {
	if len(g.queue) == 0 {
		g.writing = false
		return
	}
	next := g.queue[0]
	next.lead = true
	wake(next)
}

func wake(m *groupMember) {
	select {
	case m.wake <- struct{}{}:
	default: // already woken; the flags say why
	}
}

// lead writes group, tells its members, hands the next group to the first create waiting, and
// returns the group's error.
func (g *writeGroups) lead(ctx context.Context, s *Store, group []*groupMember) error {
	if len(group) > 1 {
		// The write serves callers other than this one: it must not fail them because this one's
		// context ended.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
		defer cancel()
	}
	creates := make([]*newEvents, len(group))
	for i, m := range group {
		creates[i] = m.events
	}
	err := s.writeCounted(ctx, creates)
	g.mu.Lock()
	for _, m := range group {
		m.err, m.done = err, true
		wake(m)
	}
	g.promoteLocked()
	g.mu.Unlock()
	return err
}

// rollbackTimeout bounds the Rollback after a failed CountedWrite.
const rollbackTimeout = 5 * time.Second

// writeCounted stores the events of creates and counts them, in one transaction sent as one text
// (CountedWrite): one round trip. If the text fails part-way, the transaction it began is still
// open on its connection, holding the rows inserted so far; it is rolled back there, before the
// connection goes back to the pool, or the connection is dropped, which rolls it back.
func (s *Store) writeCounted(ctx context.Context, creates []*newEvents) error {
	writes, args := countedWrites(creates)
	q := strings.Replace(query("CountedWrite"), "/*writes*/", writes, 1)
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, q, args...)
	if err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, rerr := conn.ExecContext(rctx, query("Rollback")); rerr != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return err
}
