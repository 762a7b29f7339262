package pagestore

import (
	"math/rand/v2"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/stretchr/testify/require"
)

// planReads: every event once, in id order; no read over packReadBytes (but one event alone);
// units that fit are never split, and several share a read; a unit that does not fit is read in
// parts that end where chunkBySize ends a row, so that its rows are as full as packRowBytes allows.
func TestPlanReadsBoundsReadsAndKeepsRowsWhole(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	var events []heldEvent
	sizes := map[int64]int64{}
	add := func(id, size int64) {
		events = append(events, heldEvent{id: id, size: size})
		sizes[id] = size
	}
	for id := int64(1000); id < 1400; id++ { // unit 1: 400 events of up to 300 KB, about 60 MiB
		add(id, 300+r.Int64N(300_000))
	}
	for unit := int64(2); unit < 40; unit++ { // small units, a few of them
		for id := unit * pages.Unit; id < unit*pages.Unit+pages.Unit; id += 1 + r.Int64N(3) {
			add(id, 300+r.Int64N(2000))
		}
	}
	add(40*pages.Unit, packReadBytes+1) // one event larger than a read
	r.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	want := len(events)

	reads := planReads(events)
	var seen []int64
	units := map[int64]int{}
	var unitRows [][]pages.Row
	for _, rd := range reads {
		var size int64
		for _, e := range rd.events {
			seen = append(seen, e.id)
			size += e.size
			require.Contains(t, rd.units, pages.UnitOf(e.id))
		}
		require.True(t, size <= packReadBytes || len(rd.events) == 1, "a read of %d bytes", size)
		for _, u := range rd.units {
			units[u]++
		}
		if rd.units[0] == 1 {
			rows := make([]pages.Row, len(rd.events))
			for i, e := range rd.events {
				rows[i] = pages.Row{ID: e.id, Payload: make([]byte, e.size-pages.RecordOverhead)}
			}
			unitRows = append(unitRows, rows)
		}
	}
	require.Len(t, seen, want)
	require.IsIncreasing(t, seen)
	require.Greater(t, units[1], 1, "the large unit is read in parts")
	for u, n := range units {
		if u != 1 {
			require.Equal(t, 1, n, "unit %d, which fits, is read whole", u)
		}
	}
	require.Less(t, len(reads), 20, "small units share reads")
	// The large unit's rows, written a read at a time, are those of the unit written at once.
	var all []pages.Row
	var written int
	for _, rows := range unitRows {
		written += len(chunkBySize(rows))
		all = append(all, rows...)
	}
	require.Equal(t, len(chunkBySize(all)), written, "no row cut short at a read's end")
}
