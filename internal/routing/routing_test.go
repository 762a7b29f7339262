package routing

import (
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/stretchr/testify/require"
)

// The published test vectors of MurmurHash3_x86_32 (the reference implementation, SMHasher's
// MurmurHash3.cpp, as listed with it and on Wikipedia's MurmurHash page). Hash uses seed 0; the
// other seeds check the library itself.
func TestMurmur3ReferenceVectors(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		seed uint32
		in   string
		want uint32
	}{
		{0, "", 0x00000000},
		{1, "", 0x514E28B7},
		{0xffffffff, "", 0x81F16F39},
		{0, "\x00\x00\x00\x00", 0x2362F9DE},
		{0, "\xff\xff\xff\xff", 0x76293B50},
		{0, "\x21\x43\x65\x87", 0xF55B516B},
		{0x5082EDEE, "\x21\x43\x65\x87", 0x2362F9DE},
		{0, "\x21\x43\x65", 0x7E4A8634},
		{0, "\x21\x43", 0xA0F7B07A},
		{0, "\x21", 0x72661CF4},
		{0x9747b28c, "aaaa", 0x5A97808A},
		{0x9747b28c, "aaa", 0x283E0130},
		{0x9747b28c, "aa", 0x5D211726},
		{0x9747b28c, "a", 0x7FA09EA6},
		{0x9747b28c, "abcd", 0xF0478627},
		{0x9747b28c, "Hello, world!", 0x24884CBA},
		{0x9747b28c, "The quick brown fox jumps over the lazy dog", 0x2FA826CD},
	} {
		require.Equalf(t, v.want, murmur3SeedSum32(v.seed, []byte(v.in)), "murmur3(%q, seed %#x)", v.in, v.seed)
		if v.seed == 0 {
			require.Equal(t, v.want, Hash([]byte(v.in)))
		}
	}
}

func TestEventHashIsTheHashOfTheDecimalID(t *testing.T) {
	t.Parallel()
	require.Equal(t, Hash([]byte("42")), EventHash(42))
	require.Equal(t, Hash([]byte("9223372036854775807")), EventHash(1<<63-1))
}

// Consecutive ids (what the allocators hand out) spread evenly over the ranges, which is what makes
// each of n agents take about 1/n of the events.
func TestConsecutiveIDsSpreadEvenly(t *testing.T) {
	t.Parallel()
	const n, total = 100_000, 4
	counts := make([]int, total)
	for id := int64(1); id <= n; id++ {
		h := EventHash(id)
		for i := range total {
			r, err := exactlyonce.ShardRange(i, total)
			require.NoError(t, err)
			if r.Contains(h) {
				counts[i]++
			}
		}
	}
	for i, c := range counts {
		require.InDeltaf(t, n/total, c, n/total*0.02, "shard %d of %d holds %d of %d events", i, total, c, n)
	}
}
