-- history_archive.marked_from and marked_next: the pages of the archive whose object is known to
-- be in the bucket, so that a read that misses one reads the page as missing, not as a page without
-- events (pagestore, archive.go and archive_read.go; docs/history.md).
--
-- The move writes an object for every page it passes: the page's events, or, for a page without
-- any, a marker (an object of no events), before it moves its place past the page. Before this
-- migration a page passed without events got no object, so a read that missed a passed page's
-- object could not tell a page without events from an object gone (deleted by hand, another
-- database's bucket), and answered as for a page without events: a 404, a listing without the
-- page's events. From marked_from (included) to marked_next (excluded), every page has had its
-- object written by a move that writes markers; a missing object there is a missing page. Below
-- marked_from (a history archived before this migration), and from marked_next on, a read that
-- misses an object asks the bucket, as before, whether it holds any page at all.
--
-- marked_next is raised only by a move that has written the page's object (AdvanceArchive, when
-- it passes the page marked_next names), so a move of the code before this migration (a sweeper
-- invocation still running it during the deploy) that passes pages without markers leaves it
-- behind; the next move starts there again (ArchiveCursor: the lower of next_page and marked_next)
-- and writes the markers it left out.
--
-- NULL columns, filled at once: a fresh database, whose move has passed nothing, has every page
-- marked from page 0; an archive written before starts at the highest page its move has passed or
-- will pass next. A column at the end of a one-row table, one ALTER; a rerun gets 1060 "duplicate
-- column", which the runner treats as applied, and its UPDATE changes nothing (it sets only NULLs).
-- A plain table: the schema rules hold.
ALTER TABLE history_archive ADD COLUMN marked_from BIGINT NULL, ADD COLUMN marked_next BIGINT NULL;

UPDATE history_archive SET marked_from = GREATEST(next_page, high_page), marked_next = GREATEST(next_page, high_page)
WHERE marked_from IS NULL;
