package exactlyonce

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"time"
)

// Claim names one claim and says what to do with the events it claims. Processing has one shape
// (Work): claim, work, settle. An event whose kind's work is inline is worked and settled in the
// claim's own transaction; any other is leased to the claim, and the worker works it outside any
// transaction and then settles it (or releases it) under the guard of its lease.
type Claim struct {
	// ID names the claim: the lease holder of what it leases and the settler of what it settles.
	// NewClaimID makes one; a claim's transaction retried after a deadlock keeps its ID.
	ID string
	// By names the path settling the events: ByProcessor, BySweeper or ByAgent.
	By string
	// Lease is how long leased events are held before another worker may claim them.
	Lease time.Duration
	// Works gives each kind its work. An event whose kind has none fails like an event whose work
	// failed.
	Works Works
	// Backoff says how often an event whose work fails is tried again, and after how long.
	Backoff Backoff
	// Range, for a claim of due events, narrows it to the events whose routing hash lies in it: an
	// agent's shard. Nil: every hash. A claim of named events ignores it.
	Range *HashRange
}

// Backoff is the retry policy of failed work: a failed attempt makes the event wait a random time up
// to Base * 2^(attempts-1), capped at Max (full jitter, so that events failing together do not come
// back together), before it is claimable again; the attempt that reaches MaxAttempts marks it
// failed for good (state failed, with the last error), so that one bad event never blocks the
// others and is never retried for ever.
type Backoff struct {
	MaxAttempts int           // default 5
	Base        time.Duration // default 1 s
	Max         time.Duration // default 5 min
}

// WithDefaults fills the zero fields.
func (b Backoff) WithDefaults() Backoff {
	if b.MaxAttempts <= 0 {
		b.MaxAttempts = 5
	}
	if b.Base <= 0 {
		b.Base = time.Second
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Minute
	}
	return b
}

// Delay returns how long an event waits after its attempt number attempt (1 for the first) failed.
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.WithDefaults()
	bound := b.Max
	if shift := attempt - 1; shift < 40 && b.Base<<shift < b.Max && b.Base<<shift > 0 {
		bound = b.Base << shift
	}
	return time.Duration(mrand.Int64N(int64(bound))) + 1
}

// GivesUp tells whether a failure of attempt number attempt is the last one allowed.
func (b Backoff) GivesUp(attempt int) bool { return attempt >= b.WithDefaults().MaxAttempts }

// Claimed is what one claiming transaction did.
type Claimed struct {
	// Settled are the events worked and settled inline, in the claim's transaction.
	Settled []int64
	// Leased are the events leased to the claim: work them, then Settle or Release them.
	Leased []Event
	// Failed are the claimed events whose inline work failed (or whose kind has no work), with why.
	// Each failure is recorded on the event in the claim's transaction: it waits its backoff, or,
	// out of attempts, it is failed for good (GaveUp).
	Failed map[int64]error
	// GaveUp are the events of Failed marked failed for good.
	GaveUp []int64
}

// Failure is a failed attempt of an event's work: which attempt it was (1 for the first) and why.
type Failure struct {
	Attempt int
	Err     error
}

// Count is the number of events the claim took: settled, leased or failed.
func (c Claimed) Count() int { return len(c.Settled) + len(c.Leased) + len(c.Failed) }

// NewClaimID returns a fresh claim id: 128 random bits, as 32 hex digits (claim_id is VARCHAR(32)).
func NewClaimID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on the platforms Go supports
	return hex.EncodeToString(b[:])
}
