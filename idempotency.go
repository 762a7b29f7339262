package exactlyonce

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// An idempotency key (the Idempotency-Key header of a create) names one create of one caller: the
// first request with it stores its event, and every repeat within the key's TTL gets the first
// one's answer instead of a second event.

// KeyHash is the identity of an idempotency key: the SHA-256 of the caller's scope and the key,
// each prefixed by its length, so that no two (scope, key) pairs share a hash and one caller's key
// never names another's.
func KeyHash(scope, key string) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{scope, key} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// KeyedCreate is one create that carries an idempotency key.
type KeyedCreate struct {
	Key         [32]byte // KeyHash of the caller's scope and key
	Fingerprint [32]byte // of the request: what a repeat must match
	// Pending creates a pending event (POST /events/async); otherwise the event is processed at
	// birth with Value (POST /events).
	Pending bool
	Value   string
	// Task, with Pending, creates a task instead of a plain pending event.
	Task *NewTask
	// Answer is the answer the create gives once its event has its id: it is stored with the key,
	// and a repeat gets it byte for byte.
	Answer func(id int64) (status int, body []byte)
}

// KeyRecord is a stored key: the request it was first used with, and the answer that got.
type KeyRecord struct {
	Fingerprint [32]byte
	Status      int
	Body        []byte
	EventID     int64
}

// KeyedResult is what one KeyedCreate came to.
type KeyedResult struct {
	// Created: this create stored its event and its key (Record is its own answer). Otherwise the
	// key was stored, unexpired, by an earlier create, whose record Record is: the caller compares
	// fingerprints.
	Created bool
	Record  KeyRecord
}

// MaxKeyedGroup is the most keyed creates stored in one transaction: its statements stay under
// the 16 KB beyond which RDS Proxy pins a session.
const MaxKeyedGroup = 100

// KeyOptions says how long keys live and how long a create waits for another holding its key.
type KeyOptions struct {
	TTL  time.Duration // how long a stored key answers repeats
	Wait time.Duration // how long to wait for a key another create holds
}

// KeyWaitMargin is what a wait for a key another create holds leaves of its request's deadline, to
// answer its 409 before the request's time runs out.
const KeyWaitMargin = time.Second

// KeyWaitUntil is when a create that waits for a key another create holds gives up (a 409): wait
// from now, and no later than ctx's deadline less KeyWaitMargin. On Lambda the request's deadline is
// the API function's timeout (10 s, as IDEMPOTENCY_WAIT's default): a wait of its full length was
// cut by the timeout, a 502 from API Gateway with no Retry-After, where the caller is owed the 409
// that says the key is still in progress.
func KeyWaitUntil(ctx context.Context, wait time.Duration) time.Time {
	until := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-KeyWaitMargin).Before(until) {
		until = d.Add(-KeyWaitMargin)
	}
	return until
}
