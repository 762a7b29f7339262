package mysql

import "time"

// SetAllocatorClock makes d's block allocator read the time from now, so that a test ages its
// blocks without waiting. d must use AllocatorBlock.
func SetAllocatorClock(d *DB, now func() time.Time) {
	a := d.alloc.(*blockAllocator)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now = now
}
