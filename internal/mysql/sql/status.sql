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
