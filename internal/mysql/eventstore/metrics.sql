-- metrics: reads that measure the system for its alarms (docs/deploy.md, "Operating"). Each is a
-- consistent (non-locking) read: it takes no lock and waits for none, so measuring never holds up
-- a claim, and a claim never holds up a measurement.

-- name: OldestWaitingAge
-- The age, in microseconds on the database's clock, of the oldest event waiting to be claimed: pending
-- (state 0, which includes events released after failed work), or leased with an expired lease
-- (state 1, its claim's process gone): exactly what ClaimDue can take, grace aside. An event under a
-- live lease is held by its claim and is not counted. NULL when nothing waits. Age is counted from created_at, so an
-- event that keeps failing or keeps being skipped grows older until it is settled. `state < 2`
-- prunes it to the `open` partition (a queued task waits for the task before it, not for a claim): its cost is bounded by the open events, never by the processed
-- history. The sweeper publishes it after every run (OldestPendingAgeSeconds).
SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6))
FROM events
WHERE state < 2 AND (state = 0 OR lease_expires_at <= NOW(6));

-- name: WaitingEvents
-- How many events wait to be claimed: the same events OldestWaitingAge measures (pending, or leased
-- with an expired lease), counted. `state < 2` prunes it to the `open` partition, so its cost is
-- bounded by the open events, never by the processed history; a consistent read, no lock taken or
-- waited for. The sweeper publishes it after every run (PendingEvents).
SELECT COUNT(*)
FROM events
WHERE state < 2 AND (state = 0 OR lease_expires_at <= NOW(6));
