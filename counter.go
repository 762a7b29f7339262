package exactlyonce

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Counter actions. The source document spells the second one "readed"; "read" is accepted as well
// and means the same. Notifications always say "added" or "readed".
const (
	CounterAdded = "added"
	CounterRead  = "readed"
)

// MaxCounterText is the longest entity id, entity type or user id, in characters.
const MaxCounterText = 255

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
// members entityId, entityType, userId (strings of 1 to MaxCounterText characters) and action
// ("added", "readed" or "read"), each once, and nothing after it. Anything else is an error that
// says what is wrong: such a message fails on every delivery and ends in the dead-letter queue.
func DecodeCounterMessage(body string) (CounterMessage, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(body)))
	tok, err := dec.Token()
	if err != nil {
		return CounterMessage{}, fmt.Errorf("counter message: not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return CounterMessage{}, errors.New("counter message: not a JSON object")
	}
	var m CounterMessage
	fields := map[string]*string{"entityId": &m.EntityID, "entityType": &m.EntityType, "userId": &m.UserID, "action": &m.Action}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return CounterMessage{}, fmt.Errorf("counter message: not JSON: %w", err)
		}
		name, _ := tok.(string)
		dst, ok := fields[name]
		if !ok {
			return CounterMessage{}, fmt.Errorf("counter message: unknown member %q (want entityId, entityType, userId, action)", boundText(name))
		}
		if seen[name] {
			return CounterMessage{}, fmt.Errorf("counter message: member %q twice", name)
		}
		seen[name] = true
		tok, err = dec.Token()
		if err != nil {
			return CounterMessage{}, fmt.Errorf("counter message: not JSON: %w", err)
		}
		s, ok := tok.(string)
		if !ok {
			return CounterMessage{}, fmt.Errorf("counter message: %s must be a string", name)
		}
		*dst = s
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return CounterMessage{}, fmt.Errorf("counter message: not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return CounterMessage{}, errors.New("counter message: something follows the JSON object")
	}
	for _, name := range []string{"entityId", "entityType", "userId", "action"} {
		if !seen[name] {
			return CounterMessage{}, fmt.Errorf("counter message: %s is missing", name)
		}
	}
	for _, name := range []string{"entityId", "entityType", "userId"} {
		if err := CheckCounterText(name, *fields[name]); err != nil {
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

// CheckCounterText checks an entity id, entity type or user id: valid UTF-8 of 1 to
// MaxCounterText characters. The error names what and is safe to show a caller.
func CheckCounterText(name, s string) error {
	if !utf8.ValidString(s) {
		return Errorf(EINVALID, "%s must be valid UTF-8", name)
	}
	if n := utf8.RuneCountInString(s); n < 1 || n > MaxCounterText {
		return Errorf(EINVALID, "%s must be 1 to %d characters, got %d", name, MaxCounterText, n)
	}
	return nil
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

// CounterMismatch is a count whose stored sum differs from the number of its counted entities (an
// entity is counted while it has an added fact and no read fact), or that has an entity with a
// fact twice: what the sweeper's reconciliation reports.
type CounterMismatch struct {
	Key        CounterKey
	Sum        int64 // stored
	Counted    int64 // from the facts
	Duplicated int64 // entities with two added or two read facts
}
