// Package runtimeapi is a small implementation of the documented AWS Lambda Runtime API (version
// 2018-06-01), enough to run a function's real `bootstrap` executable as Lambda would: the
// process polls for the next invocation, gets the event with its request id, deadline and
// function ARN in headers, and posts back a response or an error. It is the Docker-free
// counterpart of `sam local invoke` (see cmd/invoke and `make invoke`).
//
//	GET  /2018-06-01/runtime/invocation/next              the next event (blocks until there is one)
//	POST /2018-06-01/runtime/invocation/{id}/response     the invocation's result
//	POST /2018-06-01/runtime/invocation/{id}/error        the invocation's error
//	POST /2018-06-01/runtime/init/error                   the runtime failed to start
//
// What it leaves out: extensions, telemetry, response streaming's chunk timing, the 6 MB payload
// limit, freezing the process between invocations.
package runtimeapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/httpserver"
)

const prefix = "/2018-06-01/runtime/"

// Server serves the Runtime API for one function on a loopback port.
type Server struct {
	// FunctionARN is sent as Lambda-Runtime-Invoked-Function-Arn.
	FunctionARN string
	// Timeout is the function timeout: each invocation's deadline (Lambda-Runtime-Deadline-Ms) is
	// this long after it is handed out. Default 30 s.
	Timeout time.Duration

	ln   net.Listener
	http *http.Server

	next chan *invocation

	mu       sync.Mutex
	inFlight map[string]*invocation
	initErr  *FunctionError
	initCh   chan struct{}
	polls    int
	first    time.Time
}

type invocation struct {
	id      string
	payload []byte
	result  chan Result
	// set when a poll takes it
	startedAt, deadline time.Time
}

// Result is what the function answered to one invocation.
type Result struct {
	RequestID string
	// Payload is the response body; nil if the function reported an error.
	Payload []byte
	// Error is the function's error, or nil.
	Error *FunctionError
	// Deadline is the deadline the function was given.
	Deadline time.Time
	Duration time.Duration
}

// FunctionError is the error document a runtime posts (errorType, errorMessage, stackTrace).
type FunctionError struct {
	Type       string          `json:"errorType"`
	Message    string          `json:"errorMessage"`
	StackTrace json.RawMessage `json:"stackTrace,omitempty"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// Start listens on a free loopback port and serves until Close.
func Start(functionARN string, timeout time.Duration) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{FunctionARN: functionARN, Timeout: timeout, ln: ln, next: make(chan *invocation),
		inFlight: map[string]*invocation{}, initCh: make(chan struct{})}
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Second
	}
	s.http = httpserver.New(s)
	go func() { _ = s.http.Serve(ln) }()
	return s, nil
}

// Addr is the value of AWS_LAMBDA_RUNTIME_API for the function's process (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving.
func (s *Server) Close() error { return s.http.Close() }

// Polls returns how many times the runtime asked for the next invocation.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// FirstPollAt is when the runtime first asked for an invocation (zero if it has not).
func (s *Server) FirstPollAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// InitError is closed when the runtime reported an init error; InitErr then returns it.
func (s *Server) InitError() <-chan struct{} { return s.initCh }

// InitErr returns the init error the runtime reported, or nil.
func (s *Server) InitErr() *FunctionError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initErr
}

// ErrNoRuntime is returned by Invoke when the process stopped polling (it exited or hung) before
// taking or answering the invocation, as Lambda's Runtime.ExitError.
var ErrNoRuntime = errors.New("the runtime did not take or answer the invocation")

// Invoke hands payload to the next poll of the runtime and waits for its answer. Cancel ctx (for
// example when the process exits) to stop waiting.
func (s *Server) Invoke(ctx context.Context, payload []byte) (Result, error) {
	inv := &invocation{id: newRequestID(), payload: payload, result: make(chan Result, 1)}
	select {
	case s.next <- inv:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("%w: %v", ErrNoRuntime, context.Cause(ctx))
	}
	select {
	case r := <-inv.result:
		return r, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.inFlight, inv.id)
		s.mu.Unlock()
		return Result{RequestID: inv.id}, fmt.Errorf("%w: %v", ErrNoRuntime, context.Cause(ctx))
	}
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		writeError(w, http.StatusNotFound, "InvalidRequest", "unknown path "+r.URL.Path)
		return
	}
	switch {
	case path == "invocation/next" && r.Method == http.MethodGet:
		s.serveNext(w, r)
	case path == "init/error" && r.Method == http.MethodPost:
		s.serveInitError(w, r)
	case strings.HasPrefix(path, "invocation/") && r.Method == http.MethodPost:
		id, kind, ok := strings.Cut(strings.TrimPrefix(path, "invocation/"), "/")
		if !ok || (kind != "response" && kind != "error") {
			writeError(w, http.StatusNotFound, "InvalidRequest", "unknown path "+r.URL.Path)
			return
		}
		s.serveResult(w, r, id, kind)
	default:
		writeError(w, http.StatusNotFound, "InvalidRequest", r.Method+" "+r.URL.Path+" is not part of the Runtime API")
	}
}

func (s *Server) serveNext(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.polls++
	if s.first.IsZero() {
		s.first = time.Now()
	}
	s.mu.Unlock()
	var inv *invocation
	select {
	case inv = <-s.next:
	case <-r.Context().Done():
		return
	}
	deadline := time.Now().Add(s.Timeout)
	s.mu.Lock()
	inv.startedAt, inv.deadline = time.Now(), deadline
	s.inFlight[inv.id] = inv
	s.mu.Unlock()
	h := w.Header()
	h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(deadline.UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", s.FunctionARN)
	h.Set("Lambda-Runtime-Trace-Id", "Root=1-"+strconv.FormatInt(time.Now().Unix(), 16)+"-"+inv.id[:8]+";Sampled=0")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(inv.payload)
}

func (s *Server) serveResult(w http.ResponseWriter, r *http.Request, id, kind string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "InvalidRequest", "could not read the body")
		return
	}
	s.mu.Lock()
	inv, ok := s.inFlight[id]
	delete(s.inFlight, id)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusBadRequest, "InvalidRequestID", "no invocation in flight has id "+id)
		return
	}
	res := Result{RequestID: id, Deadline: inv.deadline, Duration: time.Since(inv.startedAt)}
	// A streamed response that failed midway carries its error in trailers.
	if typ := r.Trailer.Get("Lambda-Runtime-Function-Error-Type"); kind == "response" && typ != "" {
		fe := &FunctionError{Type: typ}
		if raw, err := base64.StdEncoding.DecodeString(r.Trailer.Get("Lambda-Runtime-Function-Error-Body")); err == nil {
			_ = json.Unmarshal(raw, fe)
		}
		res.Error = fe
	} else if kind == "error" {
		fe := &FunctionError{}
		if err := json.Unmarshal(body, fe); err != nil || fe.Type == "" {
			fe.Type = r.Header.Get("Lambda-Runtime-Function-Error-Type")
			if fe.Type == "" {
				fe.Type = "Unknown"
			}
			fe.Message = string(body)
		}
		res.Error = fe
	} else {
		res.Payload = body
	}
	inv.result <- res
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"OK"}`))
}

func (s *Server) serveInitError(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fe := &FunctionError{}
	if err := json.Unmarshal(body, fe); err != nil || fe.Type == "" {
		fe.Type = r.Header.Get("Lambda-Runtime-Function-Error-Type")
		fe.Message = string(body)
	}
	s.mu.Lock()
	if s.initErr == nil {
		s.initErr = fe
		close(s.initCh)
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"OK"}`))
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(FunctionError{Type: typ, Message: msg})
}
