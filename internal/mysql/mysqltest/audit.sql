-- The audit: what the exactly-once checker (internal/verify) reads of the tables. Each statement
-- scans a whole table, the history's included: tests, the chaos run and the benchmark run them,
-- never the product. Consistent reads: they take no lock and wait for none.

-- name: Audit
-- Every event of `events` with what settled it, a consistent read of every partition; then
-- AuditPages reads the packed history.
SELECT id, state, COALESCE(processed_by, ''), COALESCE(claim_id, ''), value IS NOT NULL FROM events;

-- name: AuditPages
-- Every column of every page row of the packed history (/*columns*/: c0 .. c99).
SELECT /*columns*/ FROM event_pages;

-- name: PageRowCounts
-- The page rows of event_pages and the events they hold, exact: a scan of every page row's small
-- columns (GET /history reads the table's estimate instead, eventstore.HistoryTiers).
SELECT COUNT(*), COALESCE(SUM(events), 0) FROM event_pages;

-- name: AuditHighPage
-- The audit of the archive (ArchivedRows), after its read of `events` and of the page rows: the
-- pages the move has passed (below high_page), the only ones whose objects may hold an event the
-- database does not (a page at or above it has every event in its rows), so the only ones it
-- reads from the bucket. Read after the rows, as the product's reads do: a move that deleted a
-- page's rows after the audit read them had raised high_page past the page. A consistent read of
-- one row.
SELECT high_page FROM history_archive;
