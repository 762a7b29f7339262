package pages

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// pageColumns returns the columns of page holding rows with ids from first, step apart.
func pageColumns(t *testing.T, r *rand.Rand, page, first, step int64) ([Columns][]byte, []Row) {
	t.Helper()
	var cols [Columns][]byte
	var all []Row
	byUnit := map[int64][]Row{}
	for id := page*Size + first; id < (page+1)*Size; id += step {
		x := row(r, id)
		all = append(all, x)
		byUnit[UnitOf(id)] = append(byUnit[UnitOf(id)], x)
	}
	for u, rows := range byUnit {
		_, unitCols, err := Encode(rows)
		require.NoError(t, err)
		for i, c := range unitCols {
			cols[FirstColumn(u)+i] = c
		}
	}
	return cols, all
}

// An archived page gives back every event of its page rows, each found alone, and nothing else.
func TestObjectFindsEachEventOfItsPage(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const page = 12345
	cols, all := pageColumns(t, r, page, 7, 13)
	obj := EncodeObject(page, &cols)
	for _, want := range all {
		got, ok, err := FindInObject(obj, want.ID)
		require.NoError(t, err)
		require.True(t, ok, "event %d", want.ID)
		require.Equal(t, want, got)
	}
	_, ok, err := FindInObject(obj, page*Size+8) // not one of the page's events
	require.NoError(t, err)
	require.False(t, ok)
	back, err := ObjectColumns(obj, page)
	require.NoError(t, err)
	require.Equal(t, cols, back, "the columns as they were")
}

// A corrupt object, a truncated one, and one read as another page's, are errors, never a wrong
// event or a miss.
func TestObjectRefusesCorruptTruncatedAndMisplacedObjects(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const page = 7
	cols, all := pageColumns(t, r, page, 0, 97)
	obj := EncodeObject(page, &cols)
	id := all[len(all)/2].ID

	flipped := append([]byte(nil), obj...)
	flipped[len(flipped)-10] ^= 0x40
	_, _, err := FindInObject(flipped, id)
	require.ErrorContains(t, err, "checksum")

	_, _, err = FindInObject(obj[:len(obj)-1], id)
	require.ErrorContains(t, err, "truncated")

	_, err = ObjectColumns(obj, page+1)
	require.ErrorContains(t, err, "says page 7")

	_, _, err = FindInObject([]byte("not a page"), id)
	require.Error(t, err)
}

// Merging a page's archived columns with its page rows keeps each event once, the last column's
// where both hold it, in id order.
func TestMergeColumnsKeepsEachEventOnceTheLastWins(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	a := []Row{row(r, 10), row(r, 12), row(r, 14)}
	b := []Row{row(r, 11), row(r, 12), row(r, 15)}
	_, ca, err := Encode(a)
	require.NoError(t, err)
	_, cb, err := Encode(b)
	require.NoError(t, err)
	merged, err := MergeColumns(ca[0], nil, cb[0])
	require.NoError(t, err)
	got, err := Decode(merged)
	require.NoError(t, err)
	require.Equal(t, []Row{a[0], b[0], b[1], a[2], b[2]}, got)
	n, err := Count(merged)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	again, err := MergeColumns(merged, ca[0], cb[0])
	require.NoError(t, err)
	require.Equal(t, merged, again, "merging what it holds already changes nothing")
}
