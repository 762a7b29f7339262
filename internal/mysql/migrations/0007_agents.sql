-- agents: every process that searches events for due ones (sweepers, standalone agents) registers
-- here, pulses to stay alive, and processes only the events whose routing hash falls in its range
-- (internal/agents; sql/agents.sql has the statements and their locks).
--
-- No key and no index, like every table: the table holds one row per live agent (a handful), so its
-- scans are short. id is unique without a unique index because it is taken from the status counter
-- under its row lock, in the registering transaction (RegisterAgent), like an event's id. state is
-- WAITING, RUNNING or SUSPENDED; total_shard_count and assigned_shard_index are the assignment the
-- agent last persisted (NULL until its first); expiration, created_at and last_pulse_at are the
-- database's clock, so that agents' clocks do not matter. sharding is 'dynamic' or 'static'.
CREATE TABLE IF NOT EXISTS agents (
  id                   BIGINT      NOT NULL,
  name                 VARCHAR(64) NOT NULL,
  kind                 VARCHAR(16) NOT NULL,
  sharding             VARCHAR(8)  NOT NULL,
  state                VARCHAR(16) NOT NULL,
  total_shard_count    INT         NULL,
  assigned_shard_index INT         NULL,
  expiration           DATETIME(6) NOT NULL,
  created_at           DATETIME(6) NOT NULL,
  last_pulse_at        DATETIME(6) NOT NULL
) ENGINE=InnoDB;

-- events: the routing hash, MurmurHash3_x86_32 (seed 0) of the event's routing key, computed in Go
-- at insert (internal/routing: MySQL has no murmur3). An agent claims only the events whose hash
-- lies in its range (ClaimDue). Events stored before this migration keep 0, so they fall in the
-- range of shard 0 and are processed by the agent that holds it. A column at the end (INSTANT on
-- MySQL 8); a rerun gets 1060 "duplicate column", which the runner treats as applied.
ALTER TABLE events
  ADD COLUMN routing_hash INT UNSIGNED NOT NULL DEFAULT 0;
