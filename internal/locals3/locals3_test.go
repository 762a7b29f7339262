package locals3_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/stretchr/testify/require"
)

// With a directory, the endpoint keeps its objects across a restart (`make run` keeps the archived
// history so: the database no longer holds it), and creates its bucket only if it is missing; in
// memory, a restart starts empty.
func TestObjectsInADirectoryOutliveARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := locals3.Start("", dir, "history")
	require.NoError(t, err)
	require.Positive(t, srv.Pid())
	require.NoError(t, archive.New(locals3.NewClient(srv.URL), "history", -1).PutPage(ctx, 3, []byte("page three"), ""))
	srv.Stop()

	srv, err = locals3.Start("", dir, "history")
	require.NoError(t, err)
	defer srv.Stop()
	got, ok, err := archive.New(locals3.NewClient(srv.URL), "history", -1).GetPage(ctx, 3, false)
	require.NoError(t, err)
	require.True(t, ok, "the object is still there")
	require.Equal(t, []byte("page three"), got)

	mem, err := locals3.Start("", "", "history")
	require.NoError(t, err)
	defer mem.Stop()
	_, ok, err = archive.New(locals3.NewClient(mem.URL), "history", -1).GetPage(ctx, 3, false)
	require.NoError(t, err)
	require.False(t, ok, "in memory: a fresh endpoint is empty")
}
