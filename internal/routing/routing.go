// Package routing computes the routing hash every event stores at insert: MurmurHash3_x86_32 with
// seed 0 of its routing key (the event's id in decimal today; a task's reference when tasks arrive,
// so that all events of one reference fall in one agent's range). MySQL has no murmur3, so the hash
// is computed here, in Go, by a well-kept library (github.com/twmb/murmur3), tested against the
// reference implementation's published vectors.
package routing

import (
	"strconv"

	"github.com/twmb/murmur3"
)

// Hash is MurmurHash3_x86_32(key, seed 0).
func Hash(key []byte) uint32 { return murmur3.SeedSum32(0, key) }

// EventHash is the routing hash of an event routed by its id: the hash of the id's decimal digits.
func EventHash(id int64) uint32 {
	var buf [20]byte
	return Hash(strconv.AppendInt(buf[:0], id, 10))
}
