package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// HistoryTiers returns how much of the history each tier holds (tiers.sql): the rows of `events`,
// the events packed into event_pages (exact) and its rows (an estimate). It reads settled_count's
// row under a shared lock, as the overview does, and then every row of `events` (bounded by what
// is open, not folded, not packed, or failed), never the packed history. The archive's tier is nil:
// this build archives nothing.
//
// When the archive (issue 31) lands, its archived events are read in the same transaction and
// subtracted from PagedEvents, and Archive is set from the archive's own counts.
func (s *Store) HistoryTiers(ctx context.Context) (exactlyonce.HistoryTiers, error) {
	var h exactlyonce.HistoryTiers
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		h = exactlyonce.HistoryTiers{}
		var counted sql.NullInt64
		if err := tx.QueryRowContext(ctx, queries.LockSettledCountAt).Scan(&counted, &h.Time); err != nil {
			return err
		}
		var folded int64
		if err := tx.QueryRowContext(ctx, queries.TierRows).Scan(&h.EventRows, &folded); err != nil {
			return err
		}
		h.Total = counted.Int64 + h.EventRows - folded
		h.PagedEvents = counted.Int64 - folded
		if h.PagedEvents < 0 {
			return fmt.Errorf("settled_count (%d) is below the folded rows of events (%d)", counted.Int64, folded)
		}
		return nil
	})
	// The estimate after the commit: the first read of the 1,024 partitions' counts after the table
	// is opened takes a few hundred milliseconds, which folds need not wait for.
	var partitions int
	if err == nil {
		err = s.db.QueryRowContext(ctx, queries.PageRowsEstimate).Scan(&partitions, &h.PageRows)
		if err == nil && partitions == 0 {
			err = errors.New("event_pages is not in information_schema.PARTITIONS: not migrated, or not visible to this user")
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return exactlyonce.HistoryTiers{}, mysql.Interpret("history tiers", fmt.Errorf("settled_count has no row: the schema is not migrated"))
	}
	if err != nil {
		return exactlyonce.HistoryTiers{}, mysql.Interpret("history tiers", err)
	}
	return h, nil
}
