-- Event workers (issue 15): the EventService's registry (internal/processing/eventservice.go,
-- internal/mysql/workers.go, sql/workers.sql).
--
-- Every task row names the event worker that holds its reference (NULL until one does, and for a
-- task without a reference). A column at the end, one ALTER (INSTANT on MySQL 8); a rerun gets 1060
-- "duplicate column", which the runner treats as applied.
ALTER TABLE events ADD COLUMN worker_id VARCHAR(32) NULL;

-- event_workers: one row per event worker, the source document's fields plus the agent that runs
-- it (agent_id), the references it holds (reference_ids, a JSON array of at most
-- max_reference_count strings, reference_count of them), the routing hash of its first reference
-- (by which a surviving agent decides whether the worker falls in its range when it adopts it) and
-- done_at (when it became done, for the pruning after WORKER_RETENTION). No key, no index.
--
-- Partitioned by LIST on is_done: `active` (0) holds the workers that are not done, `done` (1) the
-- audit history until it is pruned. Every statement about active workers (the settlement's counts,
-- the assignment, the adoption, the stop) says `is_done = 0` and so scans only `active`, whose size
-- is the number of live event workers (references in flight / WORKER_MAX_REFERENCES, plus the
-- workers of dead agents waiting for adoption), not the history; a worker that becomes done moves to
-- `done` in the transaction that settles its last task.
CREATE TABLE IF NOT EXISTS event_workers (
  worker_id           VARCHAR(32)  NOT NULL,
  agent_id            BIGINT       NOT NULL,
  created_at          DATETIME(6)  NOT NULL,
  last_completed_task BIGINT       NULL,
  tasks_remaining     BIGINT       NOT NULL,
  will_terminate      TINYINT      NOT NULL,
  tasks_completed     BIGINT       NOT NULL,
  tasks_failed        BIGINT       NOT NULL,
  max_reference_count INT          NOT NULL,
  is_done             TINYINT      NOT NULL,
  reference_count     INT          NOT NULL,
  reference_ids       MEDIUMTEXT   NOT NULL,
  first_hash          INT UNSIGNED NOT NULL,
  done_at             DATETIME(6)  NULL
) ENGINE=InnoDB
PARTITION BY LIST (is_done) (
  PARTITION active VALUES IN (0),
  PARTITION done   VALUES IN (1)
);
