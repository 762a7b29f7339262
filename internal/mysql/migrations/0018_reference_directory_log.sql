-- reference_directory_log: the directory's entries that creates logged and the sweeper has not yet
-- moved into their cells (taskstore/directory.go; the directory itself is 0016's).
--
-- A create used to append its tasks' entries to their cells (0016's AppendDirectory) in its own
-- transaction. InnoDB reads the whole row of every row an UPDATE changes, and a slot's row holds
-- 100 cells: an append read all of them, so it cost more the longer the history (a group of 64
-- ordered tasks: 3.7 ms with cells of 2 entries, 19.5 ms with cells of 390, about what 10,000,000
-- tasks leave), under the buckets every create of those references waits for. A create now inserts
-- its entries here instead, a row for each cell it adds to (the cell's slot and column, its first
-- task's id, the entries' bytes, as a cell holds them): an insert reads no row (0.9 ms for the same
-- group, whatever the cells hold). The sweeper's maintenance moves a slot's rows into its cells
-- and deletes them, in one transaction under the slot's task bucket (CompactDirectory); a retry
-- to the end and the backfill, which append to cells directly, move their slots' rows first, in
-- their transaction under the same buckets, so that an entry never sits in a cell before an older
-- one of its task in the log. A reader reads a cell's rows here and then the cell: an entry
-- moved in between is read twice, and a task's entries are counted once (the last wins).
--
-- `slot = ?` prunes a statement to one partition (as reference_directory's, one slot each), which
-- holds what was logged for the slot since its last compaction: the create that takes its bucket's
-- positions past a multiple of 256 compacts the bucket's slots in its transaction, so a read
-- scans at most 256 tasks' entries and one create's, whatever the history and the sweeper. A slot's rows are written only by a transaction holding
-- the slot's task bucket, like its cells. first_id names a row for the delete that follows its
-- compaction: a task's entry is logged once (by its create), so no two rows share it.
--
-- While the code of 0016 still runs (a deploy's old processes, for their timeout), its creates
-- append to the cells as before; both kinds of entries are read. Partitioning is physical design,
-- not an index or a key: the schema rules hold (CheckRules).
CREATE TABLE IF NOT EXISTS reference_directory_log (
  slot     INT        NOT NULL,
  col      SMALLINT   NOT NULL,
  first_id BIGINT     NOT NULL,
  entries  MEDIUMBLOB NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (slot) PARTITIONS 256;
