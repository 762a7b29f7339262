package webhook

import (
	"testing"
	"time"
)

func TestRetryDelayBounds(t *testing.T) {
	t.Parallel()
	const draws = 2000
	base, most := time.Second, time.Minute
	for attempt := 0; attempt <= 70; attempt++ {
		want := most
		if a := max(attempt, 1); a <= 6 {
			want = base << (a - 1) // 1s, 2s, ..., 32s; then capped at 1 min
		}
		var low, high time.Duration = want, 0
		for range draws {
			d := RetryDelay(attempt, base, most, 0)
			if d <= 0 || d > want {
				t.Fatalf("RetryDelay(%d) = %s, want (0, %s]", attempt, d, want)
			}
			low, high = min(low, d), max(high, d)
		}
		// Full jitter: the draws spread over the range, not a fixed value.
		if low > want/4 || high < want*3/4 {
			t.Fatalf("RetryDelay(%d) drew only within [%s, %s] of (0, %s]", attempt, low, high, want)
		}
	}
}

func TestRetryDelayHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := RetryDelay(1, time.Second, time.Minute, 30*time.Second); d < 30*time.Second || d > time.Minute {
			t.Fatalf("Retry-After 30s: %s, want [30s, 1m]", d)
		}
		if d := RetryDelay(1, time.Second, time.Minute, time.Hour); d != time.Minute {
			t.Fatalf("Retry-After 1h, max 1m: %s, want the cap", d)
		}
		if d := RetryDelay(6, time.Second, time.Minute, time.Second); d <= 0 || d > 32*time.Second {
			t.Fatalf("Retry-After shorter than the backoff: %s, want (0, 32s]", d)
		}
	}
}

func TestRetryDelayDefaults(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := RetryDelay(1, 0, 0, 0); d <= 0 || d > DefaultRetryBase {
			t.Fatalf("defaults, first attempt: %s", d)
		}
		if d := RetryDelay(100, 0, 0, 0); d <= 0 || d > DefaultRetryMax {
			t.Fatalf("defaults, attempt 100: %s", d)
		}
		if d := RetryDelay(1, time.Hour, time.Minute, 0); d <= 0 || d > time.Minute {
			t.Fatalf("base above max: %s", d)
		}
		if d := RetryDelay(1, 1, 1, 0); d != 1 {
			t.Fatalf("bound of 1ns: %s", d)
		}
	}
}
