-- pack_turn: the packs' turn (issue 29).
--
-- The sweeper's pack (sql/pages.sql) locks the events it packs and then deletes them. Two packs
-- at once would each hold their units' events and then wait for each other in the DELETE, whose
-- scan of `settled` (no index) waits for every row another transaction holds, matching or not, even
-- at READ COMMITTED: a deadlock, run again and again while both pack. So a pack first takes the
-- lock of this table's one row (TakePackTurn, SKIP LOCKED): packs run one at a time, and a sweeper
-- that finds the turn taken packs at its next maintenance. Whether a pack holds the turn or not,
-- it is exact: what it locks and counts (PackedEvents, DeletePacked) makes it so; the turn only
-- keeps packs from deadlocking.
--
-- One row, never deleted (the sweeper may read and lock it only, sql/users.sql), inserted only
-- into an empty table, so that re-running this is harmless. A plain table: the schema rules hold.
CREATE TABLE IF NOT EXISTS pack_turn (
  turn INT NOT NULL
) ENGINE=InnoDB;

INSERT INTO pack_turn (turn) SELECT 0 FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM pack_turn);
