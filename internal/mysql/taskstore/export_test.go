package taskstore

import (
	"context"
	"reflect"
	"slices"
	"sync"

	"github.com/exactlyonce/exactlyonce"
)

// Queries exposes the store's statements to its external tests, which EXPLAIN them.
var Queries = queries

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
