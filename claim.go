package exactlyonce

import (
	"crypto/rand"
	"encoding/hex"
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
	// By names the path settling the events: ByProcessor or BySweeper.
	By string
	// Lease is how long leased events are held before another worker may claim them.
	Lease time.Duration
	// Works gives each kind its work. An event whose kind has none is left as it is (and logged by
	// the caller through Claimed.Failed).
	Works Works
}

// Claimed is what one claiming transaction did.
type Claimed struct {
	// Settled are the events worked and settled inline, in the claim's transaction.
	Settled []int64
	// Leased are the events leased to the claim: work them, then Settle or Release them.
	Leased []Event
	// Failed are the claimed events left open because their inline work failed or their kind has no
	// work, with why. Their row locks ended with the transaction: they are claimable again.
	Failed map[int64]error
}

// Count is the number of events the claim took: settled, leased or failed.
func (c Claimed) Count() int { return len(c.Settled) + len(c.Leased) + len(c.Failed) }

// NewClaimID returns a fresh claim id: 128 random bits, as 32 hex digits (claim_id is VARCHAR(32)).
func NewClaimID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on the platforms Go supports
	return hex.EncodeToString(b[:])
}
