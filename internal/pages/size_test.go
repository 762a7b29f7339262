package pages_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// The bytes a page of packed history takes, measured on a realistic sample: what docs/deploy.md's
// cost per 1,000,000,000 events ("History: Aurora against S3") is computed from. An archived page
// is one S3 object holding the page's Columns columns, so its size is the sum of the columns.
//
// The mixes are what the stores write (internal/mysql/eventstore's and taskstore's statements):
//   - sync: POST /events, born processed by the api: kind plain, a generated value, processed_by
//     "api", created and processed in the same microsecond, no claim;
//   - async: POST /events/async processed by the processor: the same plus its claim id (32 hex
//     digits) and a processed time milliseconds after the create;
//   - task: a webhook of 200 bytes of JSON to an https URL, its reference, its position and worker,
//     one successful delivery attempt (1 in 10 has a failed one first, with its error).
//
// If the format grows, the bounds below fail and docs/deploy.md's figures must be measured again.
func TestPageBytesPerEvent(t *testing.T) {
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(31, 3))
	ptr := func(s string) *string { return &s }
	i64 := func(n int64) *int64 { return &n }
	payload := []byte(`{"order":"ord_0000000000","customer":"cus_0000000000","amount":4999,"currency":"EUR",` +
		`"items":[{"sku":"sku_00000","qty":1}],"status":"paid","at":"2026-11-27T12:00:00.000000Z"}`)
	for len(payload) < 200 {
		payload = append(payload, ' ')
	}
	mixes := []struct {
		name     string
		row      func(id int64) pages.Row
		min, max float64 // bytes per event, as docs/deploy.md states them
	}{
		{"sync", func(id int64) pages.Row {
			at := base.Add(time.Duration(id) * time.Millisecond)
			return pages.Row{ID: id, RoutingHash: r.Uint32(), Kind: string(exactlyonce.KindPlain), State: 30,
				Value: ptr(exactlyonce.NewValue()), CreatedAt: at, ProcessedAt: &at, ProcessedBy: ptr("api"), ProcessCount: 1}
		}, 55, 65},
		{"async", func(id int64) pages.Row {
			at := base.Add(time.Duration(id) * time.Millisecond)
			done := at.Add(time.Duration(5+r.IntN(400)) * time.Millisecond)
			return pages.Row{ID: id, RoutingHash: r.Uint32(), Kind: string(exactlyonce.KindPlain), State: 30,
				Value: ptr(exactlyonce.NewValue()), CreatedAt: at, ProcessedAt: &done, ProcessedBy: ptr("processor"),
				ProcessCount: 1, ClaimID: ptr(exactlyonce.NewClaimID())}
		}, 95, 105},
		{"task", func(id int64) pages.Row {
			at := base.Add(time.Duration(id) * time.Millisecond)
			done := at.Add(time.Duration(20+r.IntN(400)) * time.Millisecond)
			claim := exactlyonce.NewClaimID()
			row := pages.Row{ID: id, RoutingHash: r.Uint32(), Kind: string(exactlyonce.KindTask), State: 30,
				CreatedAt: at, ProcessedAt: &done, ProcessedBy: ptr("processor"), ProcessCount: 1, Attempts: 1,
				URL: ptr("https://hooks.example.com/orders/events"), Payload: payload,
				ReferenceID: ptr("order-" + strconv.Itoa(r.IntN(1_000_000))), MaxRetries: i64(5), Position: i64(id),
				ClaimID: &claim, WorkerID: ptr(exactlyonce.NewClaimID()),
				TaskAttempts: []pages.Attempt{{Number: 1, StartedAt: done.Add(-15 * time.Millisecond), DurationUS: 14_000, Status: 200, ClaimID: claim}}}
			if r.IntN(10) == 0 {
				row.Attempts = 2
				row.TaskAttempts = append([]pages.Attempt{{Number: 1, StartedAt: at, DurationUS: 10_000_000, Status: 0,
					Error: ptr("Post \"https://hooks.example.com/orders/events\": context deadline exceeded"), ClaimID: exactlyonce.NewClaimID()}},
					row.TaskAttempts...)
				row.TaskAttempts[1].Number = 2
			}
			return row
		}, 420, 460},
	}
	for _, m := range mixes {
		t.Run(m.name, func(t *testing.T) {
			// One whole page: its Size/Unit units, each encoded as the pack encodes them.
			const page = 123_456
			total := 0
			for u := int64(0); u < pages.Size/pages.Unit; u++ {
				rows := make([]pages.Row, pages.Unit)
				for i := range rows {
					rows[i] = m.row(page*pages.Size + u*pages.Unit + int64(i))
				}
				_, cols, err := pages.Encode(rows)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cols {
					total += len(c)
				}
			}
			per := float64(total) / pages.Size
			t.Logf("%s: a page of %d events takes %d bytes (%.1f KiB): %.1f bytes an event",
				m.name, pages.Size, total, float64(total)/1024, per)
			if per < m.min || per > m.max {
				t.Errorf("%s: %.1f bytes an event, docs/deploy.md says %v-%v: measure again and update it", m.name, per, m.min, m.max)
			}
		})
	}
}
