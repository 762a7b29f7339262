-- history_archive: where the move of the packed history to S3 stands (issue 31).
--
-- The sweeper moves pages of event_pages whose newest event is older than the retention window
-- (HISTORY_RETENTION) to one S3 object a page (internal/pages' object format) in HISTORY_BUCKET,
-- reads each object back, and only then deletes the page's rows (pagestore, archive.sql). This
-- table's one row says where the next move starts (next_page: every page below it has been
-- moved, or had no row when the move passed it), the highest page it ever passed (high_page: only
-- pages below it can have an object, so that a listing of recent pages makes no GET) and how much
-- history the bucket holds
-- (archived_events, exact: the events of every page row the move deleted; archived_pages, the
-- pages with an object). A pack that writes a unit into a page below
-- next_page (a late event of a page moved already) lowers next_page to that page, under the packs'
-- turn (pack_turn), which the move's delete takes too: so a page row is never left behind the
-- move.
--
-- One row, never deleted, inserted only into an empty table, so that re-running this is harmless.
-- A plain table: the schema rules hold. Its size does not grow with the history.
CREATE TABLE IF NOT EXISTS history_archive (
  next_page       BIGINT NOT NULL,
  high_page       BIGINT NOT NULL,
  archived_pages  BIGINT NOT NULL,
  archived_events BIGINT NOT NULL
) ENGINE=InnoDB;

INSERT INTO history_archive (next_page, high_page, archived_pages, archived_events)
SELECT 0, 0, 0, 0 FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM history_archive);
