package exactlyonce

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// Counter actions. The counter service's message format spells the second one "readed", and so do
// its notifications, always "added" or "readed"; "read" is accepted as well and means the same.
const (
	CounterAdded = "added"
	CounterRead  = "readed"
)

// CounterMessage is one message of the counters queue: an entity of a type, of a user, was added
// (counted from now on) or read (not counted any more).
type CounterMessage struct {
	EntityID   string
	EntityType string
	UserID     string
	// Action is CounterAdded or CounterRead.
	Action string
}

// CounterKey names one count: the entities of one type of one user.
type CounterKey struct {
	EntityType string
	UserID     string
}

// Key is the count the message changes.
func (m CounterMessage) Key() CounterKey {
	return CounterKey{EntityType: m.EntityType, UserID: m.UserID}
}

// EntityHash identifies the message's entity (its type, user and id): the SHA-256 of the three,
// each preceded by its length, so that no two different triples share an input.
func (m CounterMessage) EntityHash() [32]byte {
	return hashTexts(m.EntityType, m.UserID, m.EntityID)
}

// UserHash is the SHA-256 of a user id, which places the user's counts (their bucket).
func UserHash(userID string) [32]byte { return hashTexts(userID) }

func hashTexts(texts ...string) [32]byte {
	h := sha256.New()
	for _, t := range texts {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(t)))
		h.Write(n[:])
		h.Write([]byte(t))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// DecodeCounterMessage parses a message body. It accepts only a JSON object with exactly the
// fields entityId, entityType, userId and action, each once (DecodeObject), and nothing after it.
// The three texts are names (name.go): entityId one of CheckName, userId and entityType, which are
// segments of the path GET /counters/{userId}/{entityType} that the console shows, of CheckNewName
// (CheckPathName's rules, and no invisible character); all read back as
// sent (DecodeString). action is "added", "readed" or "read". Anything else is an error that says
// what is wrong: such a message fails on every delivery and ends in the dead-letter queue, alone.
func DecodeCounterMessage(body string) (CounterMessage, error) {
	fields, err := DecodeObject([]byte(body))
	if err != nil {
		return CounterMessage{}, fmt.Errorf("counter message: %w", err)
	}
	names := []string{"entityId", "entityType", "userId", "action"}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(names, name) {
			return CounterMessage{}, fmt.Errorf("counter message: unknown field %q (want entityId, entityType, userId, action)", boundText(name))
		}
	}
	var m CounterMessage
	for i, dst := range []*string{&m.EntityID, &m.EntityType, &m.UserID, &m.Action} {
		raw, ok := fields[names[i]]
		if !ok {
			return CounterMessage{}, fmt.Errorf("counter message: %s is missing", names[i])
		}
		if *dst, err = DecodeString(names[i], raw); err != nil {
			return CounterMessage{}, fmt.Errorf("counter message: %w", err)
		}
	}
	for _, err := range []error{CheckName("entityId", m.EntityID), CheckNewName("entityType", m.EntityType),
		CheckNewName("userId", m.UserID)} {
		if err != nil {
			return CounterMessage{}, fmt.Errorf("counter message: %w", err)
		}
	}
	switch m.Action {
	case "added":
		m.Action = CounterAdded
	case "readed", "read":
		m.Action = CounterRead
	default:
		return CounterMessage{}, fmt.Errorf("counter message: action must be \"added\" or \"readed\", got %q", boundText(m.Action))
	}
	return m, nil
}

func boundText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// CounterResult is the notification published after each counter message: what the message
// asked, whether it changed the count (Applied), and the count's sum and version after it. A
// duplicate gets one too (Applied false, the current sum). ID is the notification's own: a
// notification may be published more than once (it is published after the commit, and again by
// the sweeper when that failed), and every copy carries the same ID. Version grows by one with
// every change of the count: a consumer that keeps the highest version it has seen per count
// drops stale and repeated notifications by it.
type CounterResult struct {
	ID         string `json:"id"`
	EntityID   string `json:"entityId"`
	EntityType string `json:"entityType"`
	UserID     string `json:"userId"`
	Action     string `json:"action"`
	Applied    bool   `json:"applied"`
	Sum        int64  `json:"sum"`
	Version    int64  `json:"version"`
}

// CounterSum is a count as stored: the number of counted entities of a key and its version.
type CounterSum struct {
	Sum     int64 `json:"sum"`
	Version int64 `json:"version"`
}

// TypeCount is one count of a user, with its entity type: a row of GET /counters/{userId}.
type TypeCount struct {
	EntityType string
	CounterSum
}

// CounterMismatch is a count whose stored sum differs from the number of its counted entities (an
// entity is counted while it has an added fact and no read fact), or that has an entity with a
// fact twice: what the sweeper's reconciliation reports.
type CounterMismatch struct {
	Key        CounterKey
	Sum        int64 // stored
	Counted    int64 // from the facts
	Duplicated int64 // entities with two added or two read facts
}
