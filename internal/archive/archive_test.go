package archive_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/stretchr/testify/require"
)

// A page written is read back as it was, through the real S3 protocol (gofakes3); a page never
// written is a miss, not an error.
func TestPutAndGetAPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := locals3.Client(t)
	b := archive.New(client, locals3.Bucket(t, client), -1)
	_, ok, err := b.GetPage(ctx, 41, false)
	require.NoError(t, err)
	require.False(t, ok, "never written")

	obj := bytes.Repeat([]byte("page 41 "), 100_000)
	require.NoError(t, b.PutPage(ctx, 41, obj, ""))
	require.True(t, b.Changed(b.PutPage(ctx, 41, []byte("other"), "")), "a page written since it was read as missing is not replaced")
	back, version, ok, err := b.ReadPage(ctx, 41)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, obj, back)
	require.NotEmpty(t, version)
	require.True(t, b.Changed(b.PutPage(ctx, 41, []byte("other"), `"0123"`)), "nor one whose version is not the one read")
	require.NoError(t, b.PutPage(ctx, 41, obj, version), "the version read: replaced")
	got, ok, err := b.GetPage(ctx, 41, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, obj, got)
}

// A bucket that does not exist (a misconfigured HISTORY_BUCKET) and an endpoint that is down are
// errors that the API answers 503 (EUNAVAILABLE), never "no page" (which would be a 404).
func TestAMissingBucketOrADownEndpointIsUnavailable(t *testing.T) {
	t.Parallel()
	b := archive.New(locals3.Client(t), "no-such-bucket-i31", -1)
	_, ok, err := b.GetPage(context.Background(), 1, false)
	require.False(t, ok)
	require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%v", err)

	srv, err := locals3.Start("", "", "b")
	require.NoError(t, err)
	client := locals3.NewClient(srv.URL)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, ok, err = archive.New(client, "b", -1).GetPage(ctx, 1, false)
	require.False(t, ok)
	require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%v", err)
}

// The cache keeps pages up to its bytes, the least recently read out first, keeps no page over a
// quarter of it, and a fresh read asks the bucket again.
func TestTheCacheIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := locals3.Client(t)
	name := locals3.Bucket(t, client)
	writer := archive.New(client, name, -1)
	const limit = 4000
	b := archive.New(client, name, limit)
	for p := range int64(8) {
		require.NoError(t, writer.PutPage(ctx, p, bytes.Repeat([]byte{byte(p)}, 900), ""))
		_, ok, err := b.GetPage(ctx, p, false)
		require.NoError(t, err)
		require.True(t, ok)
		require.LessOrEqual(t, b.CachedBytes(), int64(limit))
	}
	require.Equal(t, int64(4*900), b.CachedBytes())

	require.NoError(t, writer.PutPage(ctx, 100, make([]byte, limit/4+1), ""))
	_, _, err := b.GetPage(ctx, 100, false)
	require.NoError(t, err)
	require.Equal(t, int64(4*900), b.CachedBytes(), "a page over a quarter of the cache is not kept")

	// Page 7 is cached; rewritten by another process, a cached read still answers the old bytes, a
	// fresh one the new.
	_, version, _, err := writer.ReadPage(ctx, 7)
	require.NoError(t, err)
	require.NoError(t, writer.PutPage(ctx, 7, []byte("new"), version))
	old, _, err := b.GetPage(ctx, 7, false)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{7}, 900), old)
	fresh, _, err := b.GetPage(ctx, 7, true)
	require.NoError(t, err)
	require.Equal(t, []byte("new"), fresh)
}

// An endpoint that accepts connections and never answers (a stalled S3: its process stopped with
// SIGSTOP: the kernel still completes the TCP handshake) is EUNAVAILABLE within the Bucket's
// Timeout, for a read, a fresh read and a write alike, never a call that waits for as long as the
// caller does; resumed, it answers again.
func TestAStalledEndpointIsUnavailableWithinTheTimeout(t *testing.T) {
	t.Parallel()
	srv, err := locals3.Start("", "", "b")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	b := archive.New(locals3.NewClient(srv.URL), "b", -1)
	b.Timeout = time.Second
	ctx := context.Background()
	require.NoError(t, b.PutPage(ctx, 3, []byte("page 3"), ""))

	require.NoError(t, srv.Pause())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, srv.Resume())
		}
	}
	t.Cleanup(resume)
	for name, call := range map[string]func() error{
		"GetPage":  func() error { _, _, err := b.GetPage(ctx, 3, false); return err },
		"ReadPage": func() error { _, _, _, err := b.ReadPage(ctx, 3); return err },
		"PutPage":  func() error { return b.PutPage(ctx, 4, []byte("page 4"), "") },
	} {
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%s: %v", name, err)
			require.Less(t, time.Since(start), 5*time.Second, "%s: bounded by the Timeout, 1 s", name)
		case <-time.After(15 * time.Second):
			resume() // the call's goroutine may now end
			t.Fatalf("%s: still waiting for the stalled endpoint after 15 s (Timeout 1 s)", name)
		}
	}

	resume()
	got, ok, err := b.GetPage(ctx, 3, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte("page 3"), got, "the endpoint resumed: read again")
}

// A bucket made OnFirstUse builds its S3 client at its first call to S3, once, and not for a page
// its cache holds; a client that cannot be built (an AWS configuration that does not load) is each
// call's error, an unavailable archive (503), never "no page". The functions' cold starts build
// none (wire.Archive): most of their invocations read no archived page.
func TestTheClientIsBuiltAtTheFirstCallToS3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := locals3.Client(t)
	bucket := locals3.Bucket(t, client)
	var builds atomic.Int32
	b := archive.OnFirstUse(func() (*s3.Client, error) { builds.Add(1); return client, nil }, bucket, 0)
	require.Zero(t, builds.Load(), "nothing built before a call")
	require.NoError(t, b.PutPage(ctx, 7, []byte("page 7"), ""))
	_, ok, err := b.GetPage(ctx, 7, false)
	require.NoError(t, err)
	require.True(t, ok)
	_, _, ok, err = b.ReadPage(ctx, 7)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int32(1), builds.Load(), "built once")

	var failed atomic.Int32
	bad := archive.OnFirstUse(func() (*s3.Client, error) {
		failed.Add(1)
		return nil, errors.New("AWS configuration for HISTORY_BUCKET: invalid value AWS_MAX_ATTEMPTS=x")
	}, bucket, 0)
	for range 2 {
		_, ok, err := bad.GetPage(ctx, 7, false)
		require.False(t, ok)
		require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%v", err)
		require.ErrorContains(t, err, "AWS_MAX_ATTEMPTS")
	}
	require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(bad.PutPage(ctx, 8, []byte("x"), "")))
	require.Equal(t, int32(1), failed.Load(), "tried once")
}

// HoldsPages tells an empty bucket from one with a page object, by a listing the readers' grants
// allow; a bucket that does not exist is an unavailable archive, not an empty one.
func TestHoldsPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := locals3.Client(t)
	b := archive.New(client, locals3.Bucket(t, client), -1)
	holds, err := b.HoldsPages(ctx)
	require.NoError(t, err)
	require.False(t, holds, "an empty bucket")
	require.NoError(t, b.PutPage(ctx, 7, []byte("page 7"), ""))
	holds, err = b.HoldsPages(ctx)
	require.NoError(t, err)
	require.True(t, holds, "a page object")

	_, err = archive.New(client, "no-such-bucket-i31", -1).HoldsPages(ctx)
	require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%v", err)
}

// An object keeps the identity of the archive that wrote it (OwnerMeta, S3 user metadata): the
// local S3 (tools/s3local, gofakes3) stores it with the object, in memory and in a directory across
// a restart, and returns it on every read; the cache keeps it with the object, so that a read from
// the cache is judged as one from the bucket (pagestore: another database's object is never read
// as this one's). An object written without one reads with none.
func TestAnObjectKeepsItsOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(t *testing.T, b *archive.Bucket, page int64, owner string) {
		t.Helper()
		for _, fresh := range []bool{true, false} { // the bucket, then the cache
			got, ok, err := b.GetObject(ctx, page, fresh)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, owner, got.Owner, "fresh %v", fresh)
			require.Equal(t, []byte("page"), got.Bytes)
		}
		got, version, ok, err := b.ReadObject(ctx, page)
		require.NoError(t, err)
		require.True(t, ok)
		require.NotEmpty(t, version)
		require.Equal(t, archive.Object{Bytes: []byte("page"), Owner: owner}, got)
	}
	client := locals3.Client(t)
	b := archive.New(client, locals3.Bucket(t, client), 0)
	require.NoError(t, b.PutObject(ctx, 1, archive.Object{Bytes: []byte("page"), Owner: "2f1c0a9e-ad3b-11f0-9d4e-0242ac120002"}, ""))
	require.NoError(t, b.PutPage(ctx, 2, []byte("page"), ""))
	check(t, b, 1, "2f1c0a9e-ad3b-11f0-9d4e-0242ac120002")
	check(t, b, 2, "")
	_, version, _, err := b.ReadObject(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, b.PutObject(ctx, 1, archive.Object{Bytes: []byte("page"), Owner: "other"}, version), "a replaced object has its writer's")
	check(t, b, 1, "other")

	t.Run("in a directory, across a restart", func(t *testing.T) {
		dir := t.TempDir()
		srv, err := locals3.Start("", dir, "history")
		require.NoError(t, err)
		require.NoError(t, archive.New(locals3.NewClient(srv.URL), "history", 0).PutObject(ctx, 3, archive.Object{Bytes: []byte("page"), Owner: "mine"}, ""))
		srv.Stop()
		srv, err = locals3.Start("", dir, "history")
		require.NoError(t, err)
		defer srv.Stop()
		check(t, archive.New(locals3.NewClient(srv.URL), "history", 0), 3, "mine")
	})
}
