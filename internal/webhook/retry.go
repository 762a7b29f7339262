package webhook

import (
	"math/rand/v2"
	"time"
)

// Retry defaults, for RETRY_BASE and RETRY_MAX left unset.
const (
	DefaultRetryBase = time.Second
	DefaultRetryMax  = time.Hour
)

// RetryDelay is how long a task waits after its failed attempt number attempt (1 = the first):
// exponential backoff with full jitter, a random duration in (0, bound] where bound is
// base*2^(attempt-1) capped at max; a Retry-After the receiver asked for is honoured up to the cap
// (the delay is at least min(retryAfter, max)). It is never 0 and never above max. A base or max of
// zero or less takes DefaultRetryBase or DefaultRetryMax; an attempt below 1 counts as 1; a base
// above max is capped to max.
func RetryDelay(attempt int, base, max, retryAfter time.Duration) time.Duration {
	if base <= 0 {
		base = DefaultRetryBase
	}
	if max <= 0 {
		max = DefaultRetryMax
	}
	if attempt < 1 {
		attempt = 1
	}
	bound := max
	if shift := attempt - 1; shift < 63 && base <= max>>shift {
		bound = base << shift
	}
	bound = min(bound, max)
	d := time.Duration(rand.Int64N(int64(bound))) + 1 // (0, bound]
	if retryAfter > d {
		d = min(retryAfter, max)
	}
	return d
}
