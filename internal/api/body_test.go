package api_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// bound is how long these tests wait for an answer before they fail: far longer than any answer
// should take, even from a database a parallel suite stalls for seconds, and far shorter than "for
// ever". A passing test waits only as long as the answer takes.
const bound = 20 * time.Second

// rawServer serves the API on loopback and returns its address, for requests written by hand: a
// client that says one thing in Content-Length and sends another.
func rawServer(t *testing.T, s *api.Server) (addr string, store *wire.Stores, q *recordingQueue) {
	t.Helper()
	store = wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	q = &recordingQueue{}
	s.Stores, s.Queue = store.API(), q
	srv := openapitest.NewServer(t, s)
	return srv.Listener.Addr().String(), store, q
}

// send writes a request by hand and returns the answer, how long it took, and the connection.
func send(t *testing.T, addr, request string) (*http.Response, map[string]any, time.Duration, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	start := time.Now()
	_, err = io.WriteString(conn, request)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(start.Add(bound)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer within %s", bound)
	took := time.Since(start)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var answer map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	return resp, answer, took, conn
}

func requireNothingWritten(t *testing.T, store *wire.Stores, q *recordingQueue) {
	t.Helper()
	n, err := store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing written")
	q.mu.Lock()
	defer q.mu.Unlock()
	require.Zero(t, q.messages, "nothing sent")
}

// A body declared longer than the limit is refused on its declaration, without waiting for a
// byte of it: a client that declares 999999999 bytes and sends 2 gets its 413 at once.
func TestDeclaredLengthOverTheLimitIs413AtOnce(t *testing.T) {
	t.Parallel()
	// The read deadline is far away, so that only the declaration can answer in time.
	addr, store, q := rawServer(t, &api.Server{MaxBodyBytes: 1024, BodyReadTimeout: time.Hour})
	for _, path := range []string{"/events", "/events/async"} {
		for _, length := range []string{"1025", "999999999", "9223372036854775807"} {
			resp, answer, _, _ := send(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: "+length+"\r\n\r\n{}")
			require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s, Content-Length %s", path, length)
			require.Equal(t, "request body is larger than 1024 bytes", answer["error"])
		}
	}
	requireNothingWritten(t, store, q)
}

// A body that stops arriving is answered when the body's read deadline passes, with a JSON 408,
// and writes nothing; the connection is then closed rather than held.
func TestStalledBodyIsAnsweredAtTheDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 200 * time.Millisecond
	addr, store, q := rawServer(t, &api.Server{BodyReadTimeout: deadline})
	for name, request := range map[string]string{
		"content-length": "POST /events HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}",
		"chunked":        "POST /events/async HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
		"no byte":        "POST /events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n",
	} {
		resp, answer, took, conn := send(t, addr, request)
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, name)
		require.Equal(t, "the request body did not arrive within 200ms", answer["error"], name)
		require.GreaterOrEqual(t, took, deadline, name)
		requireClosed(t, conn)
	}
	requireNothingWritten(t, store, q)
}

// A request whose body the handler never reads (a GET, a 404, a 405) is answered at once, and its
// connection is not held waiting for the rest of a body that never comes.
func TestUnreadStalledBodyDoesNotHoldTheConnection(t *testing.T) {
	t.Parallel()
	// The deadline is well beyond what answering takes on a loaded machine (GET /events reads the
	// database, which a parallel suite can stall for seconds: with 2 s, such a stall made the answer
	// look late), so that only waiting for the body could reach it; and within bound, as the
	// connection is closed when it passes. The three connections wait for it side by side.
	const deadline = 8 * time.Second
	addr, _, _ := rawServer(t, &api.Server{BodyReadTimeout: deadline})
	var conns []net.Conn
	for _, head := range []string{"GET /events", "GET /nope", "DELETE /events"} {
		resp, _, took, conn := send(t, addr, head+" HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}")
		require.Less(t, resp.StatusCode, 500, head)
		require.Less(t, took, deadline, "%s: answered without waiting for the body", head)
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		requireClosed(t, conn)
	}
}

// requireClosed waits (up to bound) for the server to close conn.
func requireClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(bound)))
	_, err := io.Copy(io.Discard, conn)
	require.NoError(t, err, "the server closes the connection (io.Copy ends at EOF) within %s", bound)
}

// A body read in time leaves the connection to serve the next request, and no deadline behind: a
// create that runs past BodyReadTimeout after its body arrived still completes (were the deadline
// to pass while the handler runs, net/http would take it for the client hanging up and cancel the
// request's context).
func TestBodyReadInTimeKeepsTheConnectionAndNoDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 100 * time.Millisecond
	store := &slowCreateStore{wait: 3 * deadline}
	srv := openapitest.NewServer(t, &api.Server{Stores: api.Stores{Events: store}, BodyReadTimeout: deadline})
	t.Cleanup(srv.Close)
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) }}
	for range 2 {
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", srv.URL+"/events", strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "the create outlived the body's deadline")
		require.Empty(t, resp.Header.Get("Connection"))
	}
	require.Equal(t, []bool{false, true}, reused, "the second request reuses the connection")
}

// slowCreateStore creates an event after wait, unless the request's context ends first.
type slowCreateStore struct {
	api.EventStore
	wait time.Duration
}

func (s *slowCreateStore) CreateProcessed(ctx context.Context, value string) (exactlyonce.Event, error) {
	select {
	case <-time.After(s.wait):
		return exactlyonce.Event{ID: 1, Value: &value, State: exactlyonce.Processed}, nil
	case <-ctx.Done():
		return exactlyonce.Event{}, ctx.Err()
	}
}

// A body with a Content-Encoding (gzip, deflate, br) is a 400 naming the coding, in every route that
// reads a body, and writes nothing: it was read as it came, so that a gzip'd {} was "not valid JSON
// (at offset 1)", and a plain {} declared gzip was taken. identity is no coding.
func TestCompressedBodiesAreRefusedByName(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("{}"))
	require.NoError(t, zw.Close())
	for _, path := range []string{"/events", "/events/async", "/events/1/retry", "/references/r/retry"} {
		for _, tc := range []struct{ coding, body, names string }{
			{"gzip", gz.String(), `"gzip"`},
			{"gzip", "{}", `"gzip"`},
			{"identity, br", "{}", `"br"`},
			{"DEFLATE", "", `"DEFLATE"`},
		} {
			req, err := http.NewRequest("POST", b.srv.URL+path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Encoding", tc.coding)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var answer map[string]string
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s: %v", path, tc.coding, answer)
			require.Equal(t, "Content-Encoding "+tc.names+" is not supported: send the body uncompressed", answer["error"], path)
		}
	}
	requireNothingWritten(t, b.store, b.queue)
	for _, coding := range []string{"identity", "Identity", ""} {
		req, err := http.NewRequest("POST", b.srv.URL+"/events", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Encoding", coding)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "Content-Encoding %q", coding)
	}
}
