package exactlyonce

import "time"

// WorkerCursor is where a page of GET /workers' listing ends: the ordering time of its last event
// worker (createdAt for the live ones, when it became done for the done ones) and its id. The zero
// cursor is the listing's start.
type WorkerCursor struct {
	At time.Time
	ID string
}
