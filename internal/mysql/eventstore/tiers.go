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
// the events packed into event_pages (exact) and its rows (an estimate), and the archive's pages and
// events (history_archive). It reads settled_count's row under a shared lock, as the overview does,
// then history_archive's row and every row of `events` (bounded by what is open, not folded, not
// packed, or failed), never the packed history nor the bucket. Archive is nil when s reads no
// archive (WithHistory) and none was ever written.
//
// The packed events are settled_count's n less the folded rows of `events` and the archived
// events: exact, and the tiers add up to Total. The archive's row is read before `events`, so a
// move that commits between the two reads counts its page's events as still in page rows, never
// twice and never as none (the move neither folds nor packs; the sum of the two tiers is what n
// less the folded rows fixes).
func (s *Store) HistoryTiers(ctx context.Context) (exactlyonce.HistoryTiers, error) {
	var h exactlyonce.HistoryTiers
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		h = exactlyonce.HistoryTiers{}
		var counted sql.NullInt64
		if err := tx.QueryRowContext(ctx, queries.LockSettledCountAt).Scan(&counted, &h.Time); err != nil {
			return err
		}
		var archive exactlyonce.ArchiveTier
		if err := tx.QueryRowContext(ctx, queries.TierArchive).Scan(&archive.Pages, &archive.Events); err != nil {
			return err
		}
		var folded int64
		if err := tx.QueryRowContext(ctx, queries.TierRows).Scan(&h.EventRows, &folded); err != nil {
			return err
		}
		h.Total = counted.Int64 + h.EventRows - folded
		h.PagedEvents = counted.Int64 - folded - archive.Events
		if h.PagedEvents < 0 {
			return fmt.Errorf("settled_count (%d) is below the folded rows of events (%d) and the archived events (%d)",
				counted.Int64, folded, archive.Events)
		}
		if s.history.Archive != nil || archive.Pages > 0 || archive.Events > 0 {
			h.Archive = &archive
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
