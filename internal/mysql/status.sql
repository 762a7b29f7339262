-- status: the one-row global id counter.

-- name: LockCounter
-- Takes the exclusive row lock on the counter and reads it. Every allocation serialises here,
-- which is what makes ids unique without an auto-increment: nobody else can read-and-advance the
-- counter until this transaction ends. Runs at READ COMMITTED like every locking transaction.
SELECT id FROM status FOR UPDATE;

-- name: AdvanceCounter
-- Advances the counter by the number of ids taken, under the lock LockCounter holds. The ids
-- handed out are (old, old + n].
UPDATE status SET id = id + ?;

-- name: ReadCounter
-- The counter's current value, by a consistent read without a lock: every id at or below it has
-- been handed out. Used to tell an id that names no event (above it) from a settled one (Outcomes).
SELECT id FROM status;

-- The counter's row itself, checked by every Migrate (schema.go). There must be exactly one:
-- with two, LockCounter locks and reads one and AdvanceCounter moves both, so two writers can take
-- the same ids; with none, nobody can take any.

-- name: CounterRows
-- How many rows the counter has. A consistent read of a one-row table: no lock.
SELECT COUNT(*) FROM status;

-- name: LargestEventID
-- The largest id any event has, to re-create a lost counter row above it. A consistent read (no
-- lock, at any isolation level) that scans every partition of events: it runs only when the row is
-- missing, under the migration lock. Packed events (sql/pages.sql) count by their page's last id,
-- which is at least theirs: the counter may skip a few ids, never hand one out twice. Archived
-- events (migrations/0017_history_archive.sql) count by the first id of the highest page the
-- move ever passed (high_page: only pages below it have an object), above every id they hold: a
-- history all archived has no event and no page row left to say how far its ids went.
SELECT GREATEST((SELECT COALESCE(MAX(id), 0) FROM events),
                (SELECT COALESCE(MAX(page) * 10000 + 9999, 0) FROM event_pages),
                (SELECT COALESCE(MAX(high_page) * 10000, 0) FROM history_archive));

-- name: SeedCounter
-- Re-creates the counter's row at ?, only if there is none. Only Migrate inserts here, under its
-- named lock, so two processes cannot both insert it; there is no unique key to stop them.
INSERT INTO status (id) SELECT ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM status);
