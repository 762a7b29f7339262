package bench

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The archive group asked for more archived events than the disk under TMPDIR holds refuses before
// it writes anything (or opens a database), naming the bytes it needs, and leaves no directory
// behind.
func TestArchiveRefusesWhatTheDiskCannotHold(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var progress bytes.Buffer
	r := &run{cfg: Config{Mode: Smoke, Archived: 1_000_000_000_000_000, Progress: &progress}, report: &Report{Mode: Smoke}}
	err := runArchive(context.Background(), r, "archive")
	require.Error(t, err)
	require.Regexp(t, `1000000000000000 archived events need about [0-9.]+ GB \([0-9]+ bytes: .*\) in .*, which has [0-9.]+ GB \([0-9]+ bytes\) free`, err.Error())
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "the group's directory is removed when it refuses")
	require.Empty(t, r.report.Rows)
}

// The estimate is of the objects LoadArchivedHistory writes: about 600 KB a page of 10,000 events
// (the 1,000,000,000 events are some 60 GB), never less than the pages the events span.
func TestArchiveDiskNeedCountsThePages(t *testing.T) {
	t.Parallel()
	one, _, err := archiveDiskNeed(t.TempDir(), 10_000)
	require.NoError(t, err)
	billion, free, err := archiveDiskNeed(t.TempDir(), 1_000_000_000)
	require.NoError(t, err)
	require.Positive(t, free)
	require.Greater(t, billion, int64(55e9))
	require.Less(t, billion, int64(80e9))
	require.Greater(t, one, int64(1<<30), "the margin")
}
