package local_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The local run's servers (the API with the console, the metrics endpoint) close a keep-alive
// connection once it has been idle for Options.IdleTimeout: a client that made a request and went
// quiet does not hold its connection for ever (one stayed open over 200 s). The bound is lowered
// here so the test does not wait the default's minute.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := localsqs.Client(t)
	queues := localsqs.Queues(t, client, 30, 5)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys, err := local.Start(ctx, store, client, local.Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, MetricsAddr: "127.0.0.1:0", Queues: queues,
		IdleTimeout: idle}, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sys.Wait())
	})
	for _, target := range []string{sys.URL + "/events", sys.ConsoleURL, sys.MetricsURL} {
		u, err := url.Parse(target)
		require.NoError(t, err)
		c, err := net.Dial("tcp", u.Host)
		require.NoError(t, err)
		defer c.Close()
		// One request, kept alive, answered in full. The server's idle time starts after it has
		// answered, so after sent.
		sent := time.Now()
		_, err = io.WriteString(c, "GET "+u.Path+" HTTP/1.1\r\nHost: "+u.Host+"\r\n\r\n")
		require.NoError(t, err)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err, target)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, target)
		require.False(t, resp.Close, "%s: the server keeps the connection alive", target)

		// Then nothing: the server closes the connection once it has been idle for the bound (with
		// a margin for a loaded machine; without the bound, it never does).
		require.NoError(t, c.SetReadDeadline(time.Now().Add(idle+10*time.Second)))
		n, err := r.Read(make([]byte, 1))
		require.Zero(t, n)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: the idle connection is still open after %s", target, time.Since(sent))
		require.ErrorIs(t, err, io.EOF, "%s: closed by the server", target)
		require.GreaterOrEqual(t, time.Since(sent), idle, "%s: closed for being idle, not sooner", target)
	}
}
