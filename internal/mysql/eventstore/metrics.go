package eventstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// OldestWaitingAge returns how long the oldest event waiting to be claimed has existed: a pending
// event, or a leased one whose lease expired. Zero when none waits. Measured on the database's
// clock (created_at and NOW(6) come from the same server), so the caller's clock does not matter.
// It reads only the `open` partition and takes no lock (metrics.sql).
func (s *Store) OldestWaitingAge(ctx context.Context) (time.Duration, error) {
	var us sql.NullInt64
	if err := s.db.QueryRowContext(ctx, queries.OldestWaitingAge).Scan(&us); err != nil {
		return 0, mysql.Interpret("read the oldest waiting event's age", err)
	}
	if !us.Valid || us.Int64 < 0 {
		return 0, nil
	}
	return time.Duration(us.Int64) * time.Microsecond, nil
}

// WaitingEvents returns how many events wait to be claimed: those OldestWaitingAge measures (a
// pending event, or a leased one whose lease expired). It reads only the `open` partition and
// takes no lock (metrics.sql).
func (s *Store) WaitingEvents(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, queries.WaitingEvents).Scan(&n); err != nil {
		return 0, mysql.Interpret("count the waiting events", err)
	}
	return n, nil
}
