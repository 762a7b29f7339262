package taskstore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// Queries and RetryQueries expose the store's statements to its external tests, which EXPLAIN them.
var (
	Queries      = queries
	RetryQueries = retryQueries
	DirQueries   = dirQueries
)

// QueryText is the statement name of the store's files; it panics for a name they do not have.
func QueryText(name string) string {
	f := reflect.ValueOf(queries).FieldByName(name)
	if !f.IsValid() {
		panic("no statement named " + name)
	}
	return f.String()
}

// QueryNames are the names of the store's statements.
func QueryNames() []string {
	t := reflect.TypeOf(queries)
	out := make([]string, t.NumField())
	for i := range out {
		out[i] = t.Field(i).Name
	}
	return out
}

// WatchCreateGroups makes s record how many calls each shared transaction of its creates takes, and
// hold the first one until hold is closed (entered is closed when it starts); it returns the
// groups' sizes so far, and how many calls wait. Call it before the first CreateTasks.
func WatchCreateGroups(s *Store, entered, hold chan struct{}) (groups func() []int, waiting func() int) {
	var mu sync.Mutex
	var sizes []int
	run := s.creates.Run
	s.creates.Run = func(ctx context.Context, calls [][]exactlyonce.NewTask) ([]createdTasks, error) {
		mu.Lock()
		first := len(sizes) == 0
		sizes = append(sizes, len(calls))
		mu.Unlock()
		if first {
			close(entered)
			<-hold
		}
		return run(ctx, calls)
	}
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}, s.creates.Waiting
}

// ReferenceTasksScan is ReferenceTasks by the scans it makes until the directory is complete.
func (s *Store) ReferenceTasksScan(ctx context.Context, ref string, after int64, limit int) ([]exactlyonce.Event, error) {
	return s.referenceTasksScan(ctx, ref, after, limit)
}

// DirectoryEntries are reference ref's entries in its directory: id and position, in position
// order, and how many entries the cell holds for it (a task moved by a retry to the end has two).
func DirectoryEntries(ctx context.Context, db *sql.DB, ref string) ([][2]int64, int, error) {
	c := cellOf(ref)
	b, err := readEntryBytes(ctx, db, c)
	if err != nil {
		return nil, 0, err
	}
	var out [][2]int64
	for _, e := range cellEntries(b, c.tag) {
		out = append(out, [2]int64{e.id, e.position})
	}
	raw := 0
	for off := 0; off+entrySize <= len(b); off += entrySize {
		if bytes.Equal(b[off:off+8], c.tag[:]) {
			raw++
		}
	}
	return out, raw, nil
}

// InEachSlotOfBucket returns n references for each of the directory slots of ref's task bucket
// (slotsOfBucket), slot by slot, each in a cell of its own (n is at most directoryColumns).
func InEachSlotOfBucket(ref string, n int) [][]string {
	var out [][]string
	for _, slot := range slotsOfBucket(cellOf(ref).slot % taskBuckets) {
		var refs []string
		cols := map[int]bool{}
		for i := 0; len(refs) < n; i++ {
			r := fmt.Sprintf("%s-%d", ref, i)
			if c := cellOf(r); c.slot == slot && !cols[c.col] {
				cols[c.col] = true
				refs = append(refs, r)
			}
		}
		out = append(out, refs)
	}
	return out
}

// SameSlot returns n references that share ref's directory slot (and so its task bucket).
func SameSlot(ref string, n int) []string {
	want := cellOf(ref).slot
	var out []string
	for i := 0; len(out) < n; i++ {
		r := fmt.Sprintf("%s-%d", ref, i)
		if cellOf(r).slot == want {
			out = append(out, r)
		}
	}
	return out
}

// HoldRetriesBeforeBucket makes s's bulk retries that go in place first (retryInPlaceFirst) stop
// once they have written their tasks, before they take the bucket: each sends on entered, then
// waits until hold is closed. Call it before the first RetryReference.
func HoldRetriesBeforeBucket(s *Store, entered chan<- struct{}, hold <-chan struct{}) {
	s.beforeRetryBucket = func() {
		entered <- struct{}{}
		<-hold
	}
}

// RetryInParts makes s's bulk retries go in parts of size failed tasks, run parts for at most
// budget a call, and, if before is not nil, call before(n) ahead of part n (an error from it ends
// the call there, as a process killed between parts would). Call it before the first
// RetryReference.
func RetryInParts(s *Store, size int, budget time.Duration, before func(part int) error) {
	s.RetryParts(size, budget)
	s.beforeRetryPart = before
}

// CountFailedSetReads makes s count its bulk retries' reads of a reference's failed set
// (RetryStateOfReference) and returns how many so far. Call it before the first RetryReference.
func CountFailedSetReads(s *Store) func() int64 {
	var n atomic.Int64
	s.onFailedSetRead = func() { n.Add(1) }
	return n.Load
}

// CountStartedAsked makes s count the later tasks its bulk retries in place first ask "has it
// started?" about, and returns how many so far. Call it before the first RetryReference.
func CountStartedAsked(s *Store) func() int64 {
	var n atomic.Int64
	s.onStartedAsked = func(k int) { n.Add(int64(k)) }
	return n.Load
}

// AfterFailedSetRead makes s's bulk retries call f right after they read the reference's failed
// set, before they lock anything. Call it before the first RetryReference.
func AfterFailedSetRead(s *Store, f func()) { s.afterFailedSetRead = f }

// OnRetryMissed makes s call f when a task's retry finds its task not failed under the lock, before
// it reads the task's state again. Call it before the first RetryTask.
func OnRetryMissed(s *Store, f func()) { s.onRetryMissed = f }
