package exactlyonce

import "testing"

func TestShardRangesCoverTheSpaceOnce(t *testing.T) {
	t.Parallel()
	for _, total := range []int{1, 2, 3, 4, 7, 10, 1000} {
		next := uint64(0)
		for i := range total {
			r, err := ShardRange(i, total)
			if err != nil {
				t.Fatal(err)
			}
			if uint64(r.Lo) != next || r.Hi < r.Lo {
				t.Fatalf("total %d: range %d is %s, want it to start at %d", total, i, r, next)
			}
			next = uint64(r.Hi) + 1
		}
		if next != 1<<32 {
			t.Fatalf("total %d: the ranges end at %d, want 2^32", total, next)
		}
	}
	if r, _ := ShardRange(0, 1); r != AllHashes {
		t.Fatalf("one shard is %s, want the whole space", r)
	}
	for _, bad := range [][2]int{{0, 0}, {-1, 2}, {2, 2}} {
		if _, err := ShardRange(bad[0], bad[1]); err == nil {
			t.Fatalf("ShardRange(%d, %d) gave no error", bad[0], bad[1])
		}
	}
}
