-- event_counts: the number of events, spread over 32 slots created in advance
-- (migrations/0005_event_counts.sql). Every create adds its events to one slot in the transaction
-- that inserts them, so the count is exact and a reader sees every committed create; GET /events
-- sums the slots instead of scanning every event.

-- name: AddCount
-- Adds ? events to slot ? (the first id's, MOD 32), in the transaction that inserted them: the row
-- lock it takes is held until that transaction ends, so it comes last, right before the commit, and
-- no writer holds a slot while it waits for anything else (no deadlock can form on the slots).
-- Without an index the UPDATE scans the slots up to its own (LIMIT 1 ends the scan there: each slot
-- exists once). It runs at READ COMMITTED, where the scan skips a slot another writer holds by
-- reading its last committed version (a semi-consistent read) instead of waiting for it, and
-- releases at once the slots it passes: writers wait only for the writer of their own slot.
UPDATE event_counts SET n = n + ? WHERE slot = ? LIMIT 1;

-- name: CountedWrite
-- A create in one round trip, atomic: the event inserts and AddCount in one transaction, sent as
-- one text of several statements (the driver's multiStatements, which db.go turns on). The server
-- runs them in order and stops at the first that fails, leaving the transaction open on the
-- connection: the caller then sends Rollback on the same connection, or drops the connection, which
-- rolls it back. /*writes*/ is the INSERTs of the events (InsertProcessedRows, InsertPendingRows)
-- and AddCount, separated by semicolons. READ COMMITTED as in every locking transaction (tx.go).
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
START TRANSACTION;
/*writes*/;
COMMIT;

-- name: Rollback
-- Ends the transaction a CountedWrite that failed part-way left open.
ROLLBACK;

-- name: Count
-- GET /events: a consistent (non-locking) read of the 32 slots. Every committed create has added
-- its events to one of them in its own transaction, and an uncommitted one to none, so the sum is
-- exactly the committed events, whatever the history's size.
SELECT COALESCE(SUM(n), 0) FROM event_counts;
