-- events: the drain's lost fifth (issue 30). url and last_error, NULL on every plain event, cost
-- every read of a row their declared width: MariaDB and MySQL hold a row in a buffer as wide as its
-- columns' declared sizes, and InnoDB fills an SQL NULL by copying the column's default into that
-- buffer, all of its width (row_sel_store_mysql_rec). url VARCHAR(2048) in utf8mb4 is 8,194 bytes
-- of buffer and last_error VARCHAR(1024) 4,098: about 12 KB copied per NULL row per read, and the
-- drain reads each row three times (the claim's scan, the settling UPDATE's scan and its re-read
-- by position, as the UPDATE moves the row between partitions). Measured: memmove rose from 1.5%
-- to 6.4% of the server's time in the drain, and the server's CPU per event by about a fifth.
--
-- last_error becomes TEXT, whose place in the buffer is 10 bytes (a length and a pointer): every
-- writer already cuts the error to 1,024 bytes (eventstore.ErrorText, internal/mysql/eventstore/claim.go), so the
-- stored text does not change. url becomes VARBINARY(2048): 2,050 bytes of buffer, and the database
-- still refuses a url over 2,048 bytes, the limit the API states (webhook.MaxURLBytes counts bytes;
-- the old column counted 2,048 characters, up to 8,192 bytes, which the API never let through).
-- InnoDB stores both exactly as before (variable-length, inline while short). reference_id
-- (VARCHAR(255), 1,022 bytes) keeps its type: its limit counts characters and compares byte for
-- byte (utf8mb4_bin), which no narrower type keeps.
--
-- Existing data: a column's type change copies the table (ALGORITHM=COPY on MariaDB and MySQL 8):
-- the pending events and the history not yet packed into event_pages. Writes wait for the copy: on
-- a large table, run it in a maintenance window (docs/deploy.md). The ALTER is atomic, and a
-- rerun changes nothing.
ALTER TABLE events
  MODIFY COLUMN last_error TEXT           NULL,
  MODIFY COLUMN url        VARBINARY(2048) NULL;
