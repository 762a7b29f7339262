package pages

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

// row returns a row of id with every field set from r, some of them NULL.
func row(r *rand.Rand, id int64) Row {
	t := time.UnixMicro(1_700_000_000_000_000 + r.Int64N(1e12)).UTC()
	x := Row{ID: id, RoutingHash: r.Uint32(), Kind: "plain", State: 30, CreatedAt: t, ProcessCount: 1, Attempts: r.Int64N(3)}
	if r.IntN(2) == 0 {
		x.Value = ptr("v-" + string(rune('a'+r.IntN(26))))
		x.ProcessedAt = ptr(t.Add(time.Millisecond))
		x.ProcessedBy = ptr("sweeper")
		x.ClaimID = ptr("c1")
	}
	if r.IntN(3) == 0 {
		x.Kind = "task"
		x.URL = ptr("http://127.0.0.1:9/hook")
		x.Payload = []byte{}
		if r.IntN(2) == 0 {
			x.Payload = []byte(`{"a":1}`)
		}
		x.ReferenceID = ptr("ref-é")
		x.MaxRetries = ptr(int64(5))
		x.Position = ptr(r.Int64N(1 << 40))
		x.WorkerID = ptr("w-1")
		x.LastError = ptr("500 from the receiver")
		x.NextAttemptAt = ptr(t.Add(time.Second))
		x.TaskAttempts = []Attempt{{Number: 1, StartedAt: t, DurationUS: 1200, Status: 500, Error: ptr("500"), ClaimID: "c0"},
			{Number: 2, StartedAt: t.Add(time.Second), DurationUS: 900, Status: 200, ClaimID: "c1"}}
	}
	return x
}

func TestEveryRowOfAPageIsFoundInItsColumn(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var rows []Row
	for id := int64(27000); id < 28000; id++ {
		if r.IntN(10) != 0 { // gaps: ids that are not packed
			rows = append(rows, row(r, id))
		}
	}
	r.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	unit, cols, err := Encode(rows)
	require.NoError(t, err)
	require.Equal(t, int64(27), unit)
	require.Equal(t, int64(2), UnitPage(unit))
	require.Equal(t, 70, FirstColumn(unit))
	var decoded int
	for c, col := range cols {
		all, err := Decode(col)
		require.NoError(t, err)
		for i, x := range all {
			require.Equal(t, FirstColumn(unit)+c, ColumnOf(x.ID))
			if i > 0 {
				require.Less(t, all[i-1].ID, x.ID)
			}
		}
		decoded += len(all)
	}
	require.Equal(t, len(rows), decoded)
	col := func(id int64) []byte { return cols[ColumnOf(id)-FirstColumn(unit)] }
	for _, want := range rows {
		got, ok, err := Find(col(want.ID), want.ID)
		require.NoError(t, err)
		require.True(t, ok, want.ID)
		require.Equal(t, want, got)
	}
	// An id of the page that was not packed, and one of another column, are not found.
	for id := int64(27000); id < 28000; id++ {
		_, ok, err := Find(col(id), id)
		require.NoError(t, err)
		_, other, _ := Find(cols[(ColumnOf(id)-FirstColumn(unit)+1)%UnitColumns], id)
		require.False(t, other)
		if !ok {
			for _, x := range rows {
				require.NotEqual(t, id, x.ID)
			}
		}
	}
}

func TestPageAndColumnBoundaries(t *testing.T) {
	for _, c := range []struct {
		id         int64
		page       int64
		col        int
		sameAsNext bool
	}{{0, 0, 0, true}, {99, 0, 0, false}, {100, 0, 1, true}, {999, 0, 9, false}, {1000, 0, 10, true},
		{9_999, 0, 99, false}, {10_000, 1, 0, true}, {123_456_789, 12_345, 67, true}} {
		require.Equal(t, c.page, PageOf(c.id), c.id)
		require.Equal(t, c.col, ColumnOf(c.id), c.id)
		require.Equal(t, c.sameAsNext, PageOf(c.id+1) == c.page && ColumnOf(c.id+1) == c.col, c.id)
		// A unit's columns are the columns of its ids.
		u := UnitOf(c.id)
		require.Equal(t, c.page, UnitPage(u), c.id)
		require.GreaterOrEqual(t, c.col, FirstColumn(u), c.id)
		require.Less(t, c.col, FirstColumn(u)+UnitColumns, c.id)
	}
}

func TestEncodeRefusesWhatIsNotOnePage(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	_, _, err := Encode(nil)
	require.Error(t, err)
	_, _, err = Encode([]Row{row(r, 999), row(r, 1000)})
	require.ErrorContains(t, err, "not of unit")
	_, _, err = Encode([]Row{row(r, 5), row(r, 5)})
	require.ErrorContains(t, err, "twice")
}

func TestACorruptColumnIsAnErrorNotAPanic(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	_, cols, err := Encode([]Row{row(r, 1), row(r, 2), row(r, 3)})
	require.NoError(t, err)
	col := cols[0]
	_, err = Decode(nil)
	require.Error(t, err)
	_, err = Decode(append([]byte{9}, col[1:]...))
	require.ErrorContains(t, err, "unknown format")
	for cut := 2; cut < len(col); cut++ {
		rows, err := Decode(col[:cut])
		// A cut between records is a shorter column; anywhere else it is an error.
		require.True(t, err != nil || len(rows) < 3, "cut at %d of %d", cut, len(col))
	}
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	_, cols, _ := Encode([]Row{row(r, 10), row(r, 11)})
	f.Add(cols[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := Decode(b)
		if err != nil {
			return
		}
		for _, x := range rows {
			if _, ok, err := Find(b, x.ID); err != nil || !ok {
				t.Fatalf("decoded %d but Find did not: %v", x.ID, err)
			}
		}
	})
}

// A reference's needle is found in the columns of its tasks, and not in those of another reference's
// tasks, whose kind ("task"), url or payload holds the reference's text.
func TestAReferenceNeedleMatchesOnlyItsTasks(t *testing.T) {
	mk := func(id int64, ref string, hash uint32, payload string) Row {
		return Row{ID: id, Kind: "task", State: 30, CreatedAt: time.UnixMicro(0).UTC(), URL: ptr("http://127.0.0.1/task/ref-a"),
			Payload: []byte(payload), ReferenceID: &ref, RoutingHash: hash}
	}
	_, cols, err := Encode([]Row{mk(1, "other", 7, `{"task":"ref-a"}`), mk(150, "ref-a", 9, `{}`)})
	require.NoError(t, err)
	require.True(t, bytes.Contains(cols[1], ReferenceNeedle("ref-a", 9)))
	require.False(t, bytes.Contains(cols[0], ReferenceNeedle("ref-a", 9)), "the url and the payload hold ref-a's text")
	require.False(t, bytes.Contains(cols[0], ReferenceNeedle("task", 7)), "every task's kind is task")
	require.False(t, bytes.Contains(cols[1], ReferenceNeedle("ref-a", 8)), "another hash")
	got, ok, err := Find(cols[1], 150)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "ref-a", *got.ReferenceID)
	require.Equal(t, uint32(9), got.RoutingHash)
}

// SizeBound bounds what a record takes, at the largest integers and times every field can hold.
func TestSizeBoundBoundsARecord(t *testing.T) {
	huge := time.UnixMicro(math.MinInt64).UTC()
	big := int64(math.MinInt64)
	full := Row{ID: math.MaxInt64, RoutingHash: math.MaxUint32, Kind: "task", State: math.MinInt, CreatedAt: huge,
		ProcessCount: big, Attempts: big, Value: ptr("v"), ProcessedAt: &huge, ProcessedBy: ptr("sweeper"),
		LastError: ptr("e"), NextAttemptAt: &huge, URL: ptr("http://u"), Payload: []byte("{}"), ReferenceID: ptr("r"),
		MaxRetries: &big, Position: &big, ClaimID: ptr("c"), WorkerID: ptr("w"),
		TaskAttempts: []Attempt{{Number: big, StartedAt: huge, DurationUS: big, Status: big, Error: ptr("x"), ClaimID: "c"},
			{Number: big, StartedAt: huge, DurationUS: big, Status: big, ClaimID: "c"}}}
	for _, r := range []Row{full, {ID: math.MaxInt64 - 1, Kind: "plain", CreatedAt: huge}} {
		_, cols, err := Encode([]Row{r})
		require.NoError(t, err)
		var n int
		for _, c := range cols {
			n += len(c) - len(Empty())
		}
		require.LessOrEqual(t, n, SizeBound(r))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 1000 {
		r := row(rng, int64(i))
		_, cols, err := Encode([]Row{r})
		require.NoError(t, err)
		require.LessOrEqual(t, len(cols[ColumnOf(r.ID)])-len(Empty()), SizeBound(r))
	}
}
