package exactlyonce

// ArchiveResult is what one move of the packed history to the archive did (the
// sweeper's maintenance runs it: internal/mysql/pagestore's ArchivePages).
type ArchiveResult struct {
	Pages  int64 // pages whose rows moved to the bucket
	Events int64 // the events of those rows
	Bytes  int64 // the bytes of the objects written
	// Skipped counts pages left in the database for their size.
	Skipped int64
	// Markers counts pages passed without events whose marker (an object of no events) this move
	// wrote, so that a read that misses a passed page's object knows the page is missing.
	Markers int64
}
