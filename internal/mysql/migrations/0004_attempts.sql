-- events: the failed attempts of an event's work, so that one bad event neither blocks the others
-- nor is retried for ever.
--
-- A failed attempt increments attempts, keeps the error in last_error, and makes the event wait
-- until next_attempt_at (backoff with jitter: exactlyonce.Backoff) before a claim takes it again;
-- the attempt that reaches the bound marks it failed (state 20, in the `settled` partition) for good.
-- Claims skip events whose next_attempt_at is in the future, so the rows behind a failing one are
-- claimed in the meantime. Columns at the end, one ALTER (atomic); a rerun gets 1060 "duplicate
-- column", which the runner treats as applied.
ALTER TABLE events
  ADD COLUMN attempts        INT           NOT NULL DEFAULT 0,
  ADD COLUMN last_error      VARCHAR(1024) NULL,
  ADD COLUMN next_attempt_at DATETIME(6)   NULL;
