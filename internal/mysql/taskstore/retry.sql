-- The bulk retry's statements (retry_reference.go): a reference's failed tasks retried in a
-- statement per batch rather than one per task (issue 31: 1,000 failed tasks took 0.47 s, one
-- statement each, under the reference's bucket lock, which every create in the bucket waits for).

-- name: RetryTasks
-- RetryTask (tasks.sql) for up to 200 tasks at once: each its state and position (/*states*/ and
-- /*positions*/ are `WHEN ? THEN ?` per task: its id, its value), a fresh retry budget, its
-- attempts kept. Guarded by the failed states, with the rows locked by LockFailedTasks; pruned by
-- the ids to their subpartitions of `fresh` and `failed`. The caller checks that it changed every
-- one (LIMIT ? is their number).
UPDATE events
SET state = CASE id /*states*/ END, position = CASE id /*positions*/ END, retry_base = attempts, last_error = NULL,
    next_attempt_at = NULL, processed_at = NULL, processed_by = NULL, claim_id = NULL, lease_expires_at = NULL, worker_id = NULL
WHERE state IN (20, 40) AND id IN (/*ids*/) LIMIT ?;
