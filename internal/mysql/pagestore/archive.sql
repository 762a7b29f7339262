-- The move of the packed history to S3 (migrations/0017_history_archive.sql,
-- internal/pages' object format). The move takes a page of event_pages whose newest event is older
-- than the retention window, writes it (merged with what the bucket holds of the page already) as
-- one object, reads it back, and then, under the packs' turn, deletes the page's rows if they are
-- still those it wrote; a page without rows gets a marker, an object of no events, unless the bucket
-- holds one of it already. Every read here is of one page (`page = ?`: one partition of 1,024) or of
-- history_archive's one row; only the delete locks page rows, and only under the turn.

-- name: ArchiveCursor
-- The move, first read: where it starts (next_page, or marked_next when that is lower: pages a move
-- passed without writing their markers, migrations/0037_history_archive_marked.sql) and how much
-- the bucket holds; and the archive's identity, which it writes on every object and compares with
-- the one of an object it finds (migrations/0038_history_archive_id.sql). A consistent read.
SELECT next_page, archived_pages, archived_events, marked_next, archive_id FROM history_archive;

-- name: ArchiveHighPage
-- A reader of many events by id (History.HighPage: a reference's listing); and the processed
-- listing before it reads a page's rows, when it may stop before the page instead (History.Passed): whether the move has
-- ever passed the page
-- (page < high_page; next_page may be lowered again by a late event), so that they read the page's
-- object only then. Read after the rows: the move deletes a page's rows and
-- raises high_page past it in one transaction, so a listing that found the rows gone finds
-- high_page past the page. A consistent read of one row.
SELECT high_page FROM history_archive;

-- name: ArchiveVersion
-- The processed listing (History.ReadColumnsOnce), after its read of a span's rows, and a read by
-- id that missed the page rows (History.Get), after them: high_page, as ArchiveHighPage, and
-- archived_events, which every move that deletes page rows raises (by their events, at least one):
-- while it is unchanged, no row was deleted since, so an object of a page read under it still holds
-- every event that is in neither the rows nor `events`, and the listing reads the object once, not
-- once a span. And the pages whose object the bucket must hold (marked_from to marked_next, 0037),
-- read before the GET: a page there whose object is missing is a missing page, not one without
-- events. And the archive's identity (0038): an object naming another one is another database's,
-- never read as this one's. A consistent read of one row.
SELECT high_page, archived_events, marked_from, marked_next, archive_id FROM history_archive;

-- name: PageSize
-- The move: how many rows a page has and the bytes of their columns, so that it moves a page only
-- when it fits the move's memory bound (archiveMaxPageBytes) before it reads any column. One
-- partition. A consistent read.
SELECT COUNT(*), COALESCE(SUM(LENGTH(c0) + LENGTH(c1) + LENGTH(c2) + LENGTH(c3) + LENGTH(c4) + LENGTH(c5) + LENGTH(c6) + LENGTH(c7) + LENGTH(c8) + LENGTH(c9) + LENGTH(c10) + LENGTH(c11) + LENGTH(c12) + LENGTH(c13) + LENGTH(c14) + LENGTH(c15) + LENGTH(c16) + LENGTH(c17) + LENGTH(c18) + LENGTH(c19) + LENGTH(c20) + LENGTH(c21) + LENGTH(c22) + LENGTH(c23) + LENGTH(c24) + LENGTH(c25) + LENGTH(c26) + LENGTH(c27) + LENGTH(c28) + LENGTH(c29) + LENGTH(c30) + LENGTH(c31) + LENGTH(c32) + LENGTH(c33) + LENGTH(c34) + LENGTH(c35) + LENGTH(c36) + LENGTH(c37) + LENGTH(c38) + LENGTH(c39) + LENGTH(c40) + LENGTH(c41) + LENGTH(c42) + LENGTH(c43) + LENGTH(c44) + LENGTH(c45) + LENGTH(c46) + LENGTH(c47) + LENGTH(c48) + LENGTH(c49) + LENGTH(c50) + LENGTH(c51) + LENGTH(c52) + LENGTH(c53) + LENGTH(c54) + LENGTH(c55) + LENGTH(c56) + LENGTH(c57) + LENGTH(c58) + LENGTH(c59) + LENGTH(c60) + LENGTH(c61) + LENGTH(c62) + LENGTH(c63) + LENGTH(c64) + LENGTH(c65) + LENGTH(c66) + LENGTH(c67) + LENGTH(c68) + LENGTH(c69) + LENGTH(c70) + LENGTH(c71) + LENGTH(c72) + LENGTH(c73) + LENGTH(c74) + LENGTH(c75) + LENGTH(c76) + LENGTH(c77) + LENGTH(c78) + LENGTH(c79) + LENGTH(c80) + LENGTH(c81) + LENGTH(c82) + LENGTH(c83) + LENGTH(c84) + LENGTH(c85) + LENGTH(c86) + LENGTH(c87) + LENGTH(c88) + LENGTH(c89) + LENGTH(c90) + LENGTH(c91) + LENGTH(c92) + LENGTH(c93) + LENGTH(c94) + LENGTH(c95) + LENGTH(c96) + LENGTH(c97) + LENGTH(c98) + LENGTH(c99)), 0) FROM event_pages WHERE page = ?;

-- name: PageRows
-- The move: every column of every row of a page, to write them to its object. One partition. A
-- consistent read: what it read is compared, under the turn, with what the rows hold then
-- (LockPageRows), so a pack writing the page meanwhile is seen, not lost.
SELECT c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30, c31, c32, c33, c34, c35, c36, c37, c38, c39, c40, c41, c42, c43, c44, c45, c46, c47, c48, c49, c50, c51, c52, c53, c54, c55, c56, c57, c58, c59, c60, c61, c62, c63, c64, c65, c66, c67, c68, c69, c70, c71, c72, c73, c74, c75, c76, c77, c78, c79, c80, c81, c82, c83, c84, c85, c86, c87, c88, c89, c90, c91, c92, c93, c94, c95, c96, c97, c98, c99 FROM event_pages WHERE page = ?;

-- name: LockPageRows
-- The move's delete, under the packs' turn (pages.sql, TakePackTurn): the page's rows as they are
-- now, locked until it commits. The turn keeps packs (the only writers of page rows) out until
-- then; the lock holds against anything else. One partition.
SELECT c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30, c31, c32, c33, c34, c35, c36, c37, c38, c39, c40, c41, c42, c43, c44, c45, c46, c47, c48, c49, c50, c51, c52, c53, c54, c55, c56, c57, c58, c59, c60, c61, c62, c63, c64, c65, c66, c67, c68, c69, c70, c71, c72, c73, c74, c75, c76, c77, c78, c79, c80, c81, c82, c83, c84, c85, c86, c87, c88, c89, c90, c91, c92, c93, c94, c95, c96, c97, c98, c99 FROM event_pages WHERE page = ? FOR UPDATE;

-- name: DeletePage
-- The move's delete: the page's rows, once its object is written and read back and LockPageRows
-- found them as the object holds them. The caller checks it deleted as many rows as it locked.
DELETE FROM event_pages WHERE page = ?;

-- name: AdvanceArchive
-- The move's delete, in the same transaction: counts what left the database, moves next_page past
-- the page if it is where the move started (a pack may have lowered it to a late page below, which
-- the next move looks at first), and high_page past it. Under the turn, so no pack lowers
-- next_page at the same time.
-- The parameters: created (1: this move's PUT created the page's object of events, where the
-- bucket held none or a marker), rows (1: it deleted rows), the page, the events deleted, the page
-- and the page after it (next_page), rows and the page after it (high_page), the page and the page
-- after it (marked_next). A page counts as a new object when this move created it, or when the move
-- had never deleted rows of it (high_page <= page: a move killed after creating it). The
-- assignments run left to right: archived_pages reads high_page before it is raised. Every caller
-- has the page's object in the bucket by then (its events, or a marker: migrations/0037), so
-- marked_next moves past the page when it names it.
UPDATE history_archive SET archived_pages = archived_pages + IF(? = 1 OR (? = 1 AND high_page <= ?), 1, 0),
  archived_events = archived_events + ?, next_page = IF(next_page = ?, ?, next_page),
  high_page = IF(? = 1, GREATEST(high_page, ?), high_page), marked_next = IF(marked_next = ?, ?, marked_next);

-- name: LowerArchiveCursor
-- The pack, under its turn, when it wrote a unit into a page below next_page (a late event of a
-- page moved already): the next move starts there, so that the new row goes to the page's object
-- too. Matches no row, and so locks none at READ COMMITTED, when the page is not below next_page.
UPDATE history_archive SET next_page = ? WHERE next_page > ?;
