-- The functions' database users (users.go): one per function, with only the privileges its work
-- needs, created and granted by the migrate step, which alone connects as the admin user. /*user*/
-- is the account ('name'@'%'), validated and quoted by the caller; a table name without a database
-- is a table of the session's database. A table added by a migration adds the grants of the roles
-- that use it here, and to roleGrants in users.go.
--
-- GRANT only adds: a privilege dropped from this file stays granted until a migration REVOKEs it.
-- None of these statements takes a row lock.

-- name: CreateUserIAM
-- Aurora MySQL: a user that signs in with an IAM token (rds-db:connect), never a password. Through
-- RDS Proxy with end-to-end IAM (DefaultAuthScheme IAM_AUTH), the proxy signs in as this user with
-- a token of its own role's (docs/deploy.md). A user of that name that exists already is left as
-- it is: if it was created with a password, drop it and migrate again.
CREATE USER IF NOT EXISTS /*user*/ IDENTIFIED WITH AWSAuthenticationPlugin AS 'RDS';

-- name: CreateUserPassword
-- MariaDB and MySQL without IAM (local runs, tests): a password user.
CREATE USER IF NOT EXISTS /*user*/ IDENTIFIED BY ?;

-- name: AlterUserPassword
-- And its password set again, for a user that existed already.
ALTER USER /*user*/ IDENTIFIED BY ?;

-- name: GrantReadInsertEvents
-- api: POST /events and /events/async insert events (InsertProcessed, InsertPendingRows); GET reads
-- them (Get, Count). It never updates or deletes one.
GRANT SELECT, INSERT ON events TO /*user*/;

-- name: GrantAdvanceCounter
-- api: the allocators lock the counter and advance it (LockCounter's SELECT ... FOR UPDATE, which
-- MySQL 8 allows with SELECT plus UPDATE; AdvanceCounter). No INSERT or DELETE: only migrate seeds
-- the row. sweeper and processor: an agent takes its id from the counter when it registers
-- (RegisterAgent), so that agent ids are unique without a unique index; the processor also reads
-- it (Outcomes tells an id that names no event from a settled one by it).
GRANT SELECT, UPDATE ON status TO /*user*/;

-- name: GrantClaimSettleEvents
-- processor and sweeper: claim (SELECT ... FOR UPDATE SKIP LOCKED), lease, settle and release
-- events, and read their states. They never insert or delete one.
GRANT SELECT, UPDATE ON events TO /*user*/;

-- name: GrantReadSettledCount
-- api: GET /events reads the count's row under a shared lock (LockSettledCount). MySQL 8 allows a
-- locking read with SELECT plus UPDATE (as LockCounter's); the API never changes the row.
GRANT SELECT, UPDATE ON settled_count TO /*user*/;

-- name: GrantFoldSettledCount
-- sweeper: the fold adds what it moved to the count's row (AddSettled, an UPDATE under its row
-- lock). No INSERT or DELETE: only migrate seeds the row.
GRANT SELECT, UPDATE ON settled_count TO /*user*/;

-- name: GrantLockCounterBuckets
-- counter: locks its buckets (LockCounterBuckets, an UPDATE whose WHERE needs SELECT). No INSERT or
-- DELETE: only migrate seeds the buckets.
GRANT SELECT, UPDATE ON counter_buckets TO /*user*/;

-- name: GrantWriteCounterDirectories
-- counter: reads and writes the directories of its locked buckets (ReadCounterBuckets,
-- WriteCounterDirectories). No INSERT or DELETE: only migrate seeds them.
GRANT SELECT, UPDATE ON counter_directories TO /*user*/;

-- name: GrantWriteCounterSums
-- counter: reads, creates and updates the counts (ReadCounterSums, InsertCounterSums,
-- UpdateCounterSums). It never deletes one.
GRANT SELECT, INSERT, UPDATE ON t_counter_sum TO /*user*/;

-- name: GrantInsertCounterFacts
-- counter: inserts the entities' facts (InsertCounterFacts); it never reads, changes or deletes
-- one.
GRANT INSERT ON t_counter TO /*user*/;

-- name: GrantRecordCounterNotifications
-- counter: records its notifications and marks them published (InsertCounterNotifications,
-- MarkCounterNotificationsPublished, whose WHERE needs SELECT). It never deletes one.
GRANT SELECT, INSERT, UPDATE ON counter_notifications TO /*user*/;

-- name: GrantReadCounterSums
-- api: GET /counters reads the counts (CounterSumsOfUser, CounterSumOf); sweeper: the
-- reconciliation reads them (SampleCounterSums, ReconcileCounterSum). No lock, no write.
GRANT SELECT ON t_counter_sum TO /*user*/;

-- name: GrantSweepCounterFacts
-- sweeper: reads the facts to reconcile the counts and prunes the facts of entities read past the
-- retention (OldReadCounterEntities, ReconcileCounterSum, DeleteCounterEntities). It never
-- inserts or changes one.
GRANT SELECT, DELETE ON t_counter TO /*user*/;

-- name: GrantSweepCounterNotifications
-- sweeper: republishes unpublished notifications, marks them, prunes published ones
-- (UnpublishedCounterNotifications, MarkCounterNotificationsPublished,
-- PruneCounterNotifications). It never inserts one.
GRANT SELECT, UPDATE, DELETE ON counter_notifications TO /*user*/;

-- name: GrantKeyBuckets
-- api: keyed creates (idempotency.sql) lock their buckets' rows (LockKeyBuckets, SELECT ... FOR
-- UPDATE, which MySQL 8 allows with SELECT plus UPDATE) and rewrite their directories
-- (WriteKeyDirectories). No INSERT or DELETE: only migrate seeds them.
GRANT SELECT, UPDATE ON idempotency_buckets TO /*user*/;

-- name: GrantReadInsertKeys
-- api: keyed creates read stored keys (FindKeys) and insert new ones (InsertKeys); never update or
-- delete one.
GRANT SELECT, INSERT ON idempotency_keys TO /*user*/;

-- name: GrantPruneKeys
-- sweeper: deletes expired keys (PruneKeys), and nothing else of them.
GRANT SELECT, DELETE ON idempotency_keys TO /*user*/;

-- name: GrantAgents
-- sweeper: the sweepers are agents (internal/agents): they register (INSERT), pulse and persist
-- their assignment (UPDATE), eject expired agents and leave (DELETE), and read the topology.
-- processor: it registers as an agent without a range (INSERT, its RUNNING state by UPDATE),
-- pulses (UPDATE) and leaves (DELETE); it ejects nobody, but DELETE cannot be granted per row.
GRANT SELECT, INSERT, UPDATE, DELETE ON agents TO /*user*/;

-- name: GrantReadAgents
-- api: GET /agents lists the agents (a consistent read).
GRANT SELECT ON agents TO /*user*/;

-- name: GrantTaskBuckets
-- api, processor and sweeper: lock the buckets of the references whose order they decide
-- (LockTaskBuckets, an UPDATE that changes nothing, and BucketsAndOpen) and
-- advance their position sequences (AdvanceTaskBuckets). No INSERT or DELETE: only migrate seeds the
-- buckets.
GRANT SELECT, UPDATE ON task_buckets TO /*user*/;

-- name: GrantRecordAttempts
-- processor and sweeper: record delivery attempts (InsertAttempts). They never read, change or
-- delete one.
GRANT INSERT ON task_attempts TO /*user*/;

-- name: GrantReadAttempts
-- api: GET /events/{id}/attempts reads them (Attempts).
GRANT SELECT ON task_attempts TO /*user*/;

-- name: GrantRetryTasks
-- api: POST /events/{id}/retry puts a failed task back in its reference's order (RetryTask,
-- RequeueTask, under LockFailedTask's and ReferenceHead's row locks). The one UPDATE the API makes
-- on events, and only on the columns a retry resets: never an event's value, its id or its task.
GRANT UPDATE (state, position, retry_base, last_error, next_attempt_at, processed_at, processed_by, claim_id,
  lease_expires_at, worker_id) ON events TO /*user*/;

-- name: GrantEventWorkers
-- sweeper: its agents run event workers (sql/workers.sql): create them (InsertWorker), grow, settle,
-- adopt and stop them (UPDATE), read the live ones (recovery), and prune the done ones (DELETE).
GRANT SELECT, INSERT, UPDATE, DELETE ON event_workers TO /*user*/;

-- name: GrantRunEventWorkers
-- processor: it runs event workers of its own (agents.Rangeless): creates them (InsertWorker),
-- grows and stops them (UPDATE), and a task it settles that names an event worker changes that
-- worker's counts in the settlement (SettleWorkers). It adopts none (it has no range) and prunes
-- none (DELETE is the sweepers').
GRANT SELECT, INSERT, UPDATE ON event_workers TO /*user*/;

-- name: GrantReadEventWorkers
-- api: GET /workers and GET /workers/{workerId} read the registry (consistent reads).
GRANT SELECT ON event_workers TO /*user*/;

-- name: GrantReadPages
-- api: GET /events/{id}, the processed listing, a reference's listing and a manual retry read the
-- packed history (sql/pages.sql: GetPacked, PageRows, PagesOfReference). Consistent reads only.
GRANT SELECT ON event_pages TO /*user*/;

-- name: GrantPackPages
-- sweeper: the pack locks a page's row and writes a unit's columns of it (LockUnit, MergeUnit: the
-- events packed before, with the late ones merged in), or inserts a row of the page (InsertPage).
-- It never deletes a page row.
GRANT SELECT, INSERT, UPDATE ON event_pages TO /*user*/;

-- name: GrantPackTurn
-- sweeper: a pack takes its turn, the lock of pack_turn's one row (TakePackTurn, a SELECT ... FOR
-- UPDATE, which MySQL 8 grants with UPDATE), and reads whether the row is there (PackTurnRows). It
-- never changes the row.
GRANT SELECT, UPDATE ON pack_turn TO /*user*/;

-- name: GrantArchivePages
-- sweeper: the move to the archive (pagestore/archive.sql) deletes a page's rows once its object is
-- written and read back (LockPageRows, DeletePage), and keeps its place and counts in
-- history_archive (AdvanceArchive); the pack lowers that place for a late page
-- (LowerArchiveCursor). The only DELETE on event_pages.
GRANT DELETE ON event_pages TO /*user*/;

-- name: GrantArchiveCursor
-- sweeper: reads and updates history_archive's one row (ArchiveCursor, AdvanceArchive,
-- LowerArchiveCursor); never inserts or deletes it.
GRANT SELECT, UPDATE ON history_archive TO /*user*/;

-- name: GrantReadArchiveCursor
-- api: GET /history's tiers read how much the archive holds (eventstore.HistoryTiers, TierArchive).
-- A consistent read.
GRANT SELECT ON history_archive TO /*user*/;

-- name: GrantDeletePackedEvents
-- sweeper: the pack deletes the events it packed, in the transaction that inserted their pages
-- (DeletePacked, guarded by `state = 30` and a count of what it read). The only DELETE on events.
GRANT DELETE ON events TO /*user*/;

-- name: GrantPackAttempts
-- sweeper: the pack reads the attempts of the tasks it packs and deletes them with them
-- (PackedAttempts, DeletePackedAttempts).
GRANT SELECT, DELETE ON task_attempts TO /*user*/;

-- name: GrantReferenceDirectory
-- api: a create appends its tasks' entries to their references' directories and a retry to the
-- end appends the new positions (AppendDirectory); the listing and the retries read them
-- (ReadDirectoryCell). sweeper: the backfill reads and appends (taskstore/directory.sql). No INSERT
-- or DELETE: only migrate seeds the rows.
GRANT SELECT, UPDATE ON reference_directory TO /*user*/;

-- name: GrantLogReferenceDirectory
-- api: a create logs its tasks' entries (LogDirectory); the listing and the retries read the log
-- with the cells (ReadDirectoryEntries), and a retry to the end moves its slot's log into the
-- cells before it appends (SlotLog, DeleteSlotLog).
GRANT SELECT, INSERT, DELETE ON reference_directory_log TO /*user*/;

-- name: GrantCompactReferenceDirectory
-- sweeper: the compaction moves the log into the cells (LoggedSlots, SlotLog, DeleteSlotLog), and
-- the backfill before it appends. No INSERT: only creates log.
GRANT SELECT, DELETE ON reference_directory_log TO /*user*/;

-- name: GrantReadReferenceBackfill
-- api: whether the directory is complete (DirectoryComplete), a consistent read.
GRANT SELECT ON reference_backfill TO /*user*/;

-- name: GrantReferenceBackfill
-- sweeper: the backfill takes its row's lock (TakeBackfill, a SELECT ... FOR UPDATE, which MySQL 8
-- grants with UPDATE) and records its progress (SetBackfill). No INSERT or DELETE.
GRANT SELECT, UPDATE ON reference_backfill TO /*user*/;
