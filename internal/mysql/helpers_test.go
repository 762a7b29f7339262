package mysql_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// together runs n workers, released at once so that they race, and fails t with every error they
// return.
func together(t *testing.T, n int, work func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := work(w); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
