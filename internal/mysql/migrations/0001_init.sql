-- The schema rules: no primary key, foreign key, index, auto-increment, trigger or stored routine.
-- InnoDB then clusters each table on a hidden row id, and every WHERE is a scan. CheckRules verifies
-- the rules after every migration.

-- status: one row, the global id counter. Ids are taken from it under its row lock (status.sql).
CREATE TABLE IF NOT EXISTS status (
  id BIGINT NOT NULL
) ENGINE=InnoDB;

-- events: one row per event. value is NULL while the event is pending.
--
-- state is the partitioning key: open states (< 10: pending, and room for future leased/retrying
-- states) live in partition `open`, settled ones (>= 10: processed, and future failed) in `settled`.
-- Claims and processing updates say `state = 0`, so MySQL prunes them to the `open` partition and
-- they never scan the processed history, whose size is unbounded. Moving a row between partitions
-- happens inside the UPDATE that processes it. Reads by id and counts scan both partitions, so every
-- row stays visible to the API. Partitioning is physical design, not an index: the rules hold.
CREATE TABLE IF NOT EXISTS events (
  id            BIGINT       NOT NULL,
  value         VARCHAR(255) NULL,
  state         TINYINT      NOT NULL,
  created_at    DATETIME(6)  NOT NULL,
  processed_at  DATETIME(6)  NULL,
  processed_by  VARCHAR(16)  NULL,
  process_count INT          NOT NULL DEFAULT 0
) ENGINE=InnoDB
PARTITION BY RANGE (state) (
  PARTITION open    VALUES LESS THAN (10),
  PARTITION settled VALUES LESS THAN MAXVALUE
);

-- The counter's single row. Migrations run under a named lock (schema.go), so two processes
-- migrating an empty database at once cannot both insert it; there is no unique key to stop them.
INSERT INTO status (id) SELECT 0 FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM status);
