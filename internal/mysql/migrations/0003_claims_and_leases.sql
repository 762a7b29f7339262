-- events: the kind of an event, and the claim that holds (leases) or settled it.
--
-- kind chooses the work that processing an event does (exactlyonce.Work): 'plain' for every event
-- so far. claim_id names one claim: a worker's claiming transaction and, for work done outside a
-- transaction, the settlement that follows it. While an event is `processing` (state 1, in the
-- `open` partition), claim_id is its lease holder and lease_expires_at the end of its lease (the
-- database's clock): the settling UPDATE is guarded by both the state and claim_id, so a worker
-- whose lease expired and was taken over cannot settle. Once settled, claim_id stays as the record
-- of which claim settled it (the chaos checker matches it against the workers' own reports).
--
-- One ALTER, so the three columns arrive together or not at all. MySQL 8 has no ADD COLUMN IF NOT
-- EXISTS: the migration runner treats "duplicate column" (1060) on a rerun as already applied
-- (schema.go). With data, adding columns at the end is an in-place (INSTANT on MySQL 8) change.
ALTER TABLE events
  ADD COLUMN kind             VARCHAR(16) NOT NULL DEFAULT 'plain',
  ADD COLUMN claim_id         VARCHAR(32) NULL,
  ADD COLUMN lease_expires_at DATETIME(6) NULL;
