package exactlyonce

import "context"

// Kind names what an event is for; each kind has its own Work. Plain events (the only kind so far)
// get a generated value; tasks (a webhook to deliver) and counter updates are kinds to come.
type Kind string

// KindPlain is an event whose work is to get a generated value (NewValue).
const KindPlain Kind = "plain"

// Work is what processing one event of a kind does. Processing has one shape whatever the work:
// claim the event (a row lock taken with SKIP LOCKED), do the work, settle the event (a guarded
// UPDATE that moves it to a settled state, exactly once).
type Work interface {
	// Do does the work for the claimed event e and returns what to settle it with. An error leaves
	// the event unsettled, to be claimed again later.
	//
	// Do may run more than once for one event, because a worker can die after its work and before
	// its settlement (the event's lease then expires and another worker claims it): the work is done
	// at least once, the settlement exactly once. Work with an outside effect must tolerate that (a
	// webhook carries a stable id a receiver can drop duplicates by).
	Do(ctx context.Context, e Event) (Result, error)
	// Inline tells whether Do is short, in-process computation (no I/O, no waiting) that may run
	// while the claim's row locks are held: then claim, work and settle are one transaction, and a
	// transaction retried after a deadlock runs Do again, which must be harmless. Work that calls
	// out (an HTTP request, another service) returns false: its events are leased to the worker
	// (claim and commit), worked outside any transaction, then settled in a short transaction
	// guarded by the lease, so that no row lock is held across the call and a worker whose lease
	// expired and was taken over cannot settle.
	Inline() bool
}

// Result is what a Work gives an event to settle it with.
type Result struct {
	// Value is the event's value once processed.
	Value string
}

// Works maps each kind to its Work.
type Works map[Kind]Work

// ValueWork is a plain event's work: the value New returns for its id (default NewValue).
type ValueWork struct {
	New func(id int64) string
	// Leased makes the work go through the lease path (claim and commit, work, settle) instead of
	// the one-transaction path. Generating a value needs no lease; this exists so that tests and
	// the chaos run exercise the lease path with the real system.
	Leased bool
}

func (w ValueWork) Do(_ context.Context, e Event) (Result, error) {
	if w.New == nil {
		return Result{Value: NewValue()}, nil
	}
	return Result{Value: w.New(e.ID)}, nil
}

func (w ValueWork) Inline() bool { return !w.Leased }

// DefaultWorks are the works of every kind the system knows.
func DefaultWorks() Works { return Works{KindPlain: ValueWork{}} }
