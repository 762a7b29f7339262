package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
)

// scripted is an API that answers a script of statuses to GET /events (then 200 {"count":7}),
// each error with Retry-After when retryAfter is set, and records when each request came.
type scripted struct {
	mu         sync.Mutex
	script     []int
	retryAfter string
	ok         string // the success's body; default {"count":7}
	okStatus   int    // the success's status; default 200
	at         []time.Time
	keys       []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	status := http.StatusOK
	if len(s.script) > 0 {
		status, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusOK {
		body := s.ok
		if body == "" {
			body = `{"count":7}`
		}
		if s.okStatus != 0 {
			w.WriteHeader(s.okStatus)
		}
		_, _ = w.Write([]byte(body))
		return
	}
	if s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	w.WriteHeader(status)
	if status == http.StatusTooManyRequests { // API Gateway's throttling, in its own shape
		_, _ = w.Write([]byte(`{"message":"Too Many Requests"}`))
		return
	}
	_, _ = w.Write([]byte(`{"error":"scripted ` + strconv.Itoa(status) + `"}`))
}

func (s *scripted) requests() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

func newClient(t *testing.T, url string, retry client.Retry) *client.Client {
	t.Helper()
	c, err := client.New(url, client.Options{Retry: retry})
	require.NoError(t, err)
	return c
}

// A 503 is retried after its Retry-After, however short the backoff.
func TestA503IsRetriedAfterItsRetryAfter(t *testing.T) {
	t.Parallel()
	api := &scripted{script: []int{503, 503}, retryAfter: "1"}
	srv := openapitest.NewServer(t, api)
	n, err := newClient(t, srv.URL, client.Retry{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}).CountEvents(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 7, n)
	at := api.requests()
	require.Len(t, at, 3)
	for i := 1; i < len(at); i++ {
		require.GreaterOrEqual(t, at[i].Sub(at[i-1]), time.Second, "attempt %d waited the Retry-After", i+1)
	}
}

// A 429 (API Gateway's throttling) is retried too; the attempts are bounded by MaxAttempts, and the
// last answer is the error.
func TestA429IsRetriedUpToMaxAttempts(t *testing.T) {
	t.Parallel()
	api := &scripted{script: []int{429, 429, 429, 429}}
	srv := &http.Server{Handler: api} // 429 is API Gateway's, not the API's: not in openapi.yaml
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	_, err = newClient(t, "http://"+ln.Addr().String(), client.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond}).CountEvents(context.Background())
	require.ErrorIs(t, err, client.ErrUnavailable)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.Status)
	require.Equal(t, "Too Many Requests", apiErr.Message, "API Gateway's message")
	require.Len(t, api.requests(), 3)
}

// Any other 4xx is the API's final word: one attempt.
func TestOther4xxAreNotRetried(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 500} {
		api := &scripted{script: []int{status, status}}
		srv := openapitest.NewServer(t, api)
		_, err := newClient(t, srv.URL, client.Retry{BaseDelay: time.Millisecond}).CountEvents(context.Background())
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, status, apiErr.Status)
		require.Len(t, api.requests(), 1, "%d is not retried", status)
	}
}

// A connection refused is retried with backoff, up to MaxAttempts, and is ErrUnavailable; the
// context's deadline ends the call early rather than sleeping past it.
func TestConnectionErrorsAreRetriedWithinTheDeadline(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := newClient(t, "http://"+addr, client.Retry{MaxAttempts: 4, BaseDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond})
	_, err = c.CreateEvent(context.Background())
	require.ErrorIs(t, err, client.ErrUnavailable)
	var connErr *client.ConnectionError
	require.ErrorAs(t, err, &connErr)

	slow := newClient(t, "http://"+addr, client.Retry{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = slow.CreateEvent(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(start), 150*time.Millisecond, "a wait that cannot end in time is not started")
}

// The backoff is full jitter under a ceiling that doubles from BaseDelay up to MaxDelay.
func TestBackoffIsCappedAndJittered(t *testing.T) {
	t.Parallel()
	r := client.Retry{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for n, ceiling := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond,
		5: time.Second, 60: time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := r.Backoff(n)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceiling, "attempt %d", n)
			seen[d] = true
		}
		require.Greater(t, len(seen), 100, "attempt %d: jittered", n)
	}
}

// The key of a create is generated once and sent on every attempt.
func TestACreateKeepsItsKeyAcrossRetries(t *testing.T) {
	t.Parallel()
	api := &scripted{script: []int{503, 503, 503, 503, 503}, retryAfter: "0"}
	srv := &http.Server{Handler: api}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	c := newClient(t, "http://"+ln.Addr().String(), client.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond})
	_, err = c.CreateEvent(context.Background())
	require.ErrorIs(t, err, client.ErrUnavailable)
	_, err = c.CreateEvent(context.Background())
	require.NoError(t, err, "the third attempt is answered")
	api.mu.Lock()
	keys := api.keys
	api.mu.Unlock()
	require.Len(t, keys, 6)
	require.NotEmpty(t, keys[0])
	require.Equal(t, []string{keys[0], keys[0], keys[0]}, keys[:3], "one key for one create's attempts")
	require.Equal(t, []string{keys[3], keys[3]}, keys[4:], "and another for the next create")
	require.Regexp(t, `^eo-[0-9a-f]{32}$`, keys[0])
	require.NotEqual(t, keys[0], keys[3])
}

// With credentials, every attempt is signed with SigV4 for execute-api: the upstream signs the
// request it received again, with the same credentials, and compares.
func TestRequestsAreSignedWithSigV4(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("AKIDCLIENTTEST", "secret-for-the-test", "")
	var mu sync.Mutex
	var verified int
	answer := openapitest.Handler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count":1}`))
	}))
	// The stack's URL has the stage's path: /v1 is signed with the rest, and is API Gateway's.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		date, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		i, j := strings.Index(got, "SignedHeaders="), strings.Index(got, ", Signature=")
		if err == nil && i >= 0 && j > i {
			// The request again, with only the headers the signature says it signed.
			check, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
			for _, name := range strings.Split(got[i+len("SignedHeaders="):j], ";") {
				if name != "host" {
					check.Header.Set(name, r.Header.Get(name))
				}
			}
			c, _ := creds.Retrieve(r.Context())
			sum := sha256.Sum256(nil)
			err = v4.NewSigner().SignHTTP(r.Context(), c, check, hex.EncodeToString(sum[:]), "execute-api", "eu-west-1", date)
			if err == nil && check.Header.Get("Authorization") == got && r.URL.Path == "/v1/events" {
				mu.Lock()
				verified++
				mu.Unlock()
			}
		}
		http.StripPrefix("/v1", answer).ServeHTTP(w, r)
	}))
	t.Cleanup(upstream.Close)
	c, err := client.New(upstream.URL+"/v1/", client.Options{Credentials: aws.CredentialsProvider(creds), Region: "eu-west-1"})
	require.NoError(t, err)
	n, err := c.CountEvents(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, verified, 1, "the signature is the one the upstream computes")
}

// A 409 is retried only on a create, whose key the API says is still in flight; a read's, or a
// task's retry's (the task had not failed), is final.
func TestA409IsRetriedOnlyOnACreate(t *testing.T) {
	t.Parallel()
	api := &scripted{script: []int{409}, retryAfter: "0", okStatus: http.StatusCreated,
		ok: `{"id":5,"value":"v","state":"processed","processedBy":"api","processCount":1}`}
	srv := openapitest.NewServer(t, api)
	e, err := newClient(t, srv.URL, client.Retry{BaseDelay: time.Millisecond}).CreateEvent(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 5, e.ID)
	require.Len(t, api.requests(), 2)

	api = &scripted{script: []int{409, 409}, retryAfter: "0"}
	srv = openapitest.NewServer(t, api)
	_, err = newClient(t, srv.URL, client.Retry{BaseDelay: time.Millisecond}).RetryTask(context.Background(), 5)
	require.ErrorIs(t, err, client.ErrConflict)
	require.Len(t, api.requests(), 1)
}

// Credentials that cannot be had fail the call at once: nothing was sent, nothing is retried.
func TestMissingCredentialsAreNotRetried(t *testing.T) {
	t.Parallel()
	api := &scripted{}
	srv := openapitest.NewServer(t, api)
	broken := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no credentials here")
	})
	c, err := client.New(srv.URL, client.Options{Credentials: broken, Region: "eu-west-1", Retry: client.Retry{BaseDelay: time.Hour}})
	require.NoError(t, err)
	_, err = c.CountEvents(context.Background())
	require.ErrorContains(t, err, "no credentials here")
	require.NotErrorIs(t, err, client.ErrUnavailable)
	require.Empty(t, api.requests())
}
