-- history_archive.archive_id: the identity of this database's archive, which the move writes on
-- every object it puts in the bucket (its pages and its markers, as the S3 user metadata
-- x-amz-meta-archive-id; internal/archive's OwnerMeta), so that a read of a bucket another
-- database shares (HISTORY_BUCKET set alike on two stacks, `make run` under another DB_NAME with the
-- same S3LOCAL_DIR) tells that database's object of a page from its own: an object naming another
-- identity is the archive's unavailability for a read (a 503), never another database's events read
-- as this one's, and a move that finds one stops there (pagestore, archive.go and archive_read.go;
-- docs/history.md). An object without it (written before this migration) is read as before.
--
-- A random value, filled once: UUID() (time and node based, with a per-server sequence: two
-- databases never draw the same one). A NULL column at the end of a one-row table, one ALTER; a
-- rerun gets 1060 "duplicate column", which the runner treats as applied, and its UPDATE changes
-- nothing (it sets only a NULL): the identity is never drawn twice. A plain table: the schema
-- rules hold.
ALTER TABLE history_archive ADD COLUMN archive_id VARCHAR(36) NULL;

UPDATE history_archive SET archive_id = UUID() WHERE archive_id IS NULL;
