-- The exact count of events (migrations/0005_settled_count.sql): settled_count holds the number of
-- events folded into the `settled` and `failed` partitions (states 30 and 40, counted,
-- migrations/0011_failed_partition.sql); the `open`, `queued` and `fresh` partitions
-- (states below 30) are counted by a scan, whose size is the pending events plus what was settled
-- since the sweeper's last fold, not the history.

-- name: LockSettledCount
-- GET /events, first statement (count.go): the count's row under a shared lock, in a READ
-- COMMITTED transaction. A fold holds the row's exclusive lock from its addition to its commit, so
-- this waits for a fold that is committing, and no fold can commit until the count's transaction
-- ends: the scan that follows sees every fold that committed before it whole, and none half. Many
-- readers share the lock; a fold waits for them only as long as a count takes (a bounded scan).
-- No row (the schema is not migrated) is an error for the caller.
SELECT n FROM settled_count LOCK IN SHARE MODE;

-- name: CountUnfolded
-- GET /events, second statement: the events not folded yet, by a consistent (non-locking) read.
-- `state < 30` prunes the scan to `open` and `fresh`: the pending events and those settled since
-- the last fold.
SELECT COUNT(*) FROM events WHERE state < 30;

-- name: FoldSettled
-- The fold, first statement: moves up to ? settled events from `fresh` to `settled` (10 -> 30
-- processed, 20 -> 40 failed), in the fold's transaction. `state >= 10 AND state < 30` prunes it to
-- `fresh`. It locks the rows it moves until the commit; nobody else writes a settled row, so it
-- waits for no writer. At READ COMMITTED a row that another transaction is settling right now (not
-- committed) is skipped by the semi-consistent read, and folded next time. A second fold running at
-- once waits for these rows' locks, then finds them moved and takes the next ones: each row is
-- moved, and counted, by exactly one fold. The number of rows it changed is what the next statement
-- adds.
UPDATE events SET state = state + 20 WHERE state >= 10 AND state < 30 LIMIT ?;

-- name: AddSettled
-- The fold, second statement: adds the rows FoldSettled moved to the count, in the same transaction
-- (its row lock orders concurrent folds). The caller checks that it changed one row: with none (the
-- row was lost) the fold rolls back, so no row is moved without being counted.
UPDATE settled_count SET n = n + ?;

-- name: LockSettledCountAt
-- GET /overview, first statement: LockSettledCount's read, with the database's clock (the time the
-- overview is of). The same shared lock, for the same reason: no fold, and no retry of a folded
-- failed task (UncountRetried), commits until the overview's transaction ends.
SELECT n, NOW(6) FROM settled_count LOCK IN SHARE MODE;

-- name: OverviewCounts
-- GET /overview, second statement: the events by stored state, by one consistent read, of every
-- partition but `settled` (the processed history, which settled_count counts): `state < 30` is
-- `open`, `queued` and `fresh` (the pending set and what was settled since the last fold), as
-- CountUnfolded reads; `state >= 40` is `failed`, the failed set once folded. Run under
-- LockSettledCountAt's lock, so the `failed` partition cannot change (only a fold or a retry of a
-- folded failed task writes it, and both change settled_count): settled_count less its rows is the
-- folded processed events, exactly.
SELECT state, COUNT(*) FROM events WHERE state < 30 OR state >= 40 GROUP BY state;
