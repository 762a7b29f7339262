-- settled_count: the one-row count of the events folded into the `settled` and `failed`
-- partitions (migrations/0005_settled_count.sql). The count's and the fold's statements are the
-- event store's (eventstore/count.sql); these three are the row itself, checked by every Migrate
-- (schema.go), like the id counter's (status.sql).

-- name: SettledCountRows
-- How many rows settled_count has: exactly one is right. A consistent read, no lock.
SELECT COUNT(*) FROM settled_count;

-- name: CountSettledEvents
-- The events in the `settled` and `failed` partitions, in the packed history (pagestore/pages.sql)
-- and in its archive (history_archive's archived_events, changed in the transaction that deletes
-- the page rows it counts: pagestore/archive.sql), to
-- re-create a lost settled_count row. A consistent read that scans them (the history): it runs only
-- when the row is missing, under the migration lock. A fold cannot commit meanwhile (AddSettled
-- finds no row and it rolls back); a pack moves events from one to the other in one transaction, so
-- the statement's one snapshot counts each once.
SELECT (SELECT COUNT(*) FROM events WHERE state >= 30) + (SELECT COALESCE(SUM(events), 0) FROM event_pages)
  + (SELECT COALESCE(SUM(archived_events), 0) FROM history_archive);

-- name: SeedSettledCount
-- Re-creates settled_count's row at ?, only if there is none. Only Migrate inserts here, under its
-- named lock.
INSERT INTO settled_count (n) SELECT ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM settled_count);
