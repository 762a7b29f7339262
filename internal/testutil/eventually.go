// Package testutil holds small helpers that tests of every package share. It is for tests only:
// only _test.go files import it.
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 20 ms until it returns true or timeout passes, then fails the test
// with msg. It awaits a condition; it is not a sleep.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
