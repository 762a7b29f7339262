package exactlyonce

import "time"

// EventSets are the sets of events GET /events?state= lists, by name.
var EventSets = []string{"pending", "processing", "queued", "processed", "failed"}

// Overview is the events by state, exact, and the waiting metrics, as of Time (the database's
// clock): what GET /overview answers.
type Overview struct {
	Time                                           time.Time
	Pending, Processing, Queued, Processed, Failed int64
	Total                                          int64
	Waiting                                        int64
	OldestWaiting                                  *time.Duration // nil when nothing waits
}
