package exactlyonce

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"time"
)

// Claim names one claim. Processing has one shape: claim, work, settle. The engine
// (internal/processing) decides what becomes of each event a claim locks (Decide); the store locks,
// marks, leases and records what it is told.
type Claim struct {
	// ID names the claim: the lease holder of what it leases and the settler of what it settles.
	// NewClaimID makes one; a claim's transaction retried after a deadlock keeps its ID.
	ID string
	// By names the path settling the events: ByProcessor, BySweeper or ByAgent.
	By string
	// Lease is how long leased events are held before another worker may claim them.
	Lease time.Duration
	// Range, for a claim of due events, narrows it to the events whose routing hash lies in it: an
	// agent's shard. Nil: every hash. A claim of named events ignores it.
	Range *HashRange
	// SkipTasks, for a claim of due events, leaves tasks out of it: the engine would take none (it
	// delivers none, or its deadline leaves no time for one), and tasks locked only to be left would
	// fill the claim's limit ahead of the events it can take. A claim of named events ignores it.
	SkipTasks bool
	// Workers, when set, gives the tasks the claim leases that have a reference and no event worker
	// theirs in the claim's own transaction, as the EventService drafts them (DraftWorkers: Draft is
	// called once in every run of the transaction, with no task when it leases none); a drafted
	// growth of a worker that is not Workers.Agent's live worker with room rolls the claim back with
	// a *WorkerConflictError. Nil: the tasks are leased with the worker they have.
	Workers *DraftWorkers
}

// Decide is what a store calls inside a claim's transaction, with the rows it locked as events
// (state Processing), in the order it locked them: it returns one Decision per event, in the same
// order, which the store then writes in that transaction. It runs with the rows' locks held, so it
// does only short, in-process work; and a transaction retried after a deadlock calls it again, so
// calling it twice must be harmless.
type Decide func(ctx context.Context, claimed []Event) []Decision

// Action is what a claim does with one event it locked.
type Action uint8

const (
	// Leave leaves the event as it is: the transaction's end releases its lock. Nothing is written.
	Leave Action = iota
	// Settle settles the event, processed, with Decision.Value, in the claim's transaction.
	Settle
	// Fail records Decision.Failure on the event in the claim's transaction.
	Fail
	// Lease leases the event to the claim: the worker works it outside any transaction, then
	// settles, fails or releases it under the guard of its lease.
	Lease
)

// Decision is what becomes of one event a claim locked.
type Decision struct {
	Action  Action
	Value   string  // Settle's value
	Failure Failure // Fail's record
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
	// Settled are the events settled in the claim's transaction (Decision Settle).
	Settled []int64
	// Leased are the events leased to the claim: work them, then Settle or Release them.
	Leased []Event
	// Failed are the claimed events whose failure the claim recorded (Decision Fail), with why:
	// each waits its backoff, or is failed for good (GaveUp).
	Failed map[int64]error
	// GaveUp are the events of Failed marked failed for good.
	GaveUp []int64
	// LeftOut are the tasks a claim of named events (ClaimIDs) found claimable and left as they
	// are, pending, beyond the most tasks one claim holds in memory (eventstore.MaxClaimTasks): the
	// next claim that names them, or a claim of due events, takes them.
	LeftOut []int64
}

// Failure is what a failed attempt of an event's work comes to, as the engine decided it under its
// Backoff: the event fails for good (Final: state failed, with the error), or waits Wait and is
// claimable again. Err is the reason kept on the event.
type Failure struct {
	Final bool
	Wait  time.Duration
	Err   error
}

// Count is the number of events the claim took: settled, leased or failed.
func (c Claimed) Count() int { return len(c.Settled) + len(c.Leased) + len(c.Failed) }

// NewClaimID returns a fresh claim id: 128 random bits, as 32 hex digits (claim_id is VARCHAR(32)).
func NewClaimID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on the platforms Go supports
	return hex.EncodeToString(b[:])
}
