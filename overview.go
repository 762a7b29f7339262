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

// HistoryTiers is how much of the history each tier holds, as of Time (the database's clock): what
// GET /history answers and the console's overview shows. The tiers add up to Total, the exact
// count of events (GET /events).
type HistoryTiers struct {
	Time  time.Time
	Total int64
	// EventRows are the rows of `events`: the open events, the settled ones not packed yet, and
	// the failed ones (which are never packed).
	EventRows int64
	// PagedEvents are the events packed into event_pages, exact. PageRows is the number of its
	// rows, an estimate: InnoDB's row count of its partitions (information_schema), which insert
	// and delete keep up to date, read without touching the rows.
	PagedEvents, PageRows int64
	// Archive is the archive's tier in S3; nil when the stack archives nothing (no HISTORY_BUCKET)
	// and nothing was ever archived.
	Archive *ArchiveTier
}

// ArchiveTier is the packed history archived to S3: its page objects and the events they hold.
type ArchiveTier struct {
	Pages, Events int64
}
