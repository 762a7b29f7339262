package mysqltest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// referenceObject is the page object LoadArchivedHistory wrote before its encoding reused its
// buffers: a row of its own and a value of its own (fmt.Sprintf) an event.
func referenceObject(first, lo, hi int64, now time.Time) ([]byte, error) {
	by := "sweeper"
	page := pages.PageOf(lo)
	var cols [pages.Columns][]byte
	for u := pages.UnitOf(lo); u <= pages.UnitOf(hi-1); u++ {
		batch := make([]pages.Row, 0, pages.Unit)
		for id := max(lo, u*pages.Unit); id < min(hi, (u+1)*pages.Unit); id++ {
			v := fmt.Sprintf("archived-%d", id-first+1)
			batch = append(batch, pages.Row{ID: id, Kind: "plain", State: 30, Value: &v, CreatedAt: now,
				ProcessedAt: &now, ProcessedBy: &by, ProcessCount: 1})
		}
		_, unitCols, err := pages.Encode(batch)
		if err != nil {
			return nil, err
		}
		copy(cols[pages.FirstColumn(u):], unitCols[:])
	}
	return pages.EncodeObject(page, &cols), nil
}

// The loader's objects are what they were (byte for byte the reference's) and hold each event of
// their range as written: full pages, a part page at either end, one event, ids near 1,000,000,000.
func TestArchivedObjectsAreTheReferences(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, c := range [][3]int64{{0, 0, 10_000}, {12345, 12345, 20_000}, {5, 30_000, 33_333}, {1, 999_990_000, 1_000_000_000}, {7, 70_500, 70_501}} {
		a, err := referenceObject(c[0], c[1], c[2], now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := archivedObject(c[0], c[1], c[2], now)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%v: the object differs from the reference's", c)
		}
		for _, id := range []int64{c[1], (c[1] + c[2]) / 2, c[2] - 1} {
			r, ok, err := pages.FindInObject(b, id)
			if err != nil || !ok || r.Value == nil || *r.Value != fmt.Sprintf("archived-%d", id-c[0]+1) || r.State != 30 ||
				r.ProcessedBy == nil || *r.ProcessedBy != "sweeper" || !r.CreatedAt.Equal(now) {
				t.Fatalf("%v: event %d: %+v, %v, %v", c, id, r, ok, err)
			}
		}
	}
}

// BenchmarkReferenceObject and BenchmarkArchivedObject compare the encodings' cost.
func BenchmarkReferenceObject(b *testing.B) {
	now := time.Now()
	for i := 0; i < b.N; i++ {
		lo := int64(500_000_000 + (i%1000)*10_000)
		if _, err := referenceObject(0, lo, lo+10_000, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkArchivedObject(b *testing.B) {
	now := time.Now()
	for i := 0; i < b.N; i++ {
		lo := int64(500_000_000 + (i%1000)*10_000)
		if _, err := archivedObject(0, lo, lo+10_000, now); err != nil {
			b.Fatal(err)
		}
	}
}
