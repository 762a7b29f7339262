package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/client"
)

// A redirect is not followed: it is an error naming where it pointed, with nothing sent there. The
// client followed it as net/http does, so a create behind a 301 or 302 (an http:// base url that a
// proxy redirects to https://) was sent on as a GET /events, whose count the client decoded as the
// created event: CreateEvent returned an event with id 0 and no error, and nothing was created. A
// 307 kept the POST but lost its Idempotency-Key's guarantee of one try per attempt (and a GET's
// redirect to another host would have carried the call's SigV4 session token there).
func TestARedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count":7}`))
	}))
	t.Cleanup(api.Close)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, api.URL+r.URL.Path, status)
		}))
		c, err := client.New(front.URL, client.Options{})
		require.NoError(t, err)
		e, err := c.CreateEvent(context.Background())
		var apiErr *client.Error
		require.True(t, errors.As(err, &apiErr), "%d: CreateEvent answered %+v, %v; want an *Error", status, e, err)
		require.Equal(t, status, apiErr.Status)
		require.Contains(t, apiErr.Message, api.URL, "%d: the error names where the redirect pointed", status)
		require.NotEmpty(t, apiErr.IdempotencyKey, "a create's error names its key")
		_, err = c.CountEvents(context.Background())
		require.True(t, errors.As(err, &apiErr), "%d: CountEvents: %v", status, err)
		front.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, seen, "a redirect was followed")
}
