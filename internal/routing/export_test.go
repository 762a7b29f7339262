package routing

import "github.com/twmb/murmur3"

// murmur3SeedSum32 is the library's hash with any seed, for the reference vectors.
func murmur3SeedSum32(seed uint32, b []byte) uint32 { return murmur3.SeedSum32(seed, b) }
