package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// A retry (POST /events/{id}/retry, POST /references/{referenceId}/retry) takes no
// Idempotency-Key: one sent is a 400 naming the header, and the failed task stays failed. The key
// used to be ignored, so a caller who sent one to make the retry safe to repeat was answered 200 and
// believed it: a repeat sent after the task had failed again would retry it again, where a keyed
// create's repeat replays the first answer (docs/api.md says why a retry is not keyed).
func TestRetryRefusesAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &switchHook{}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	hook.fail.Store(true)
	id := createTask(t, b, `{"url": "`+recv.URL+`", "referenceId": "keyed-retry"}`)
	deliverAll(t, b.store)
	status, got, _ := b.do(t, "GET", fmt.Sprintf("/events/%d", id), "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "failed", got["state"])

	for _, path := range []string{fmt.Sprintf("/events/%d/retry", id), "/references/keyed-retry/retry"} {
		for _, key := range []string{"k-1", `"k-1"`, ""} {
			req, err := http.NewRequest("POST", b.srv.URL+path, nil)
			require.NoError(t, err)
			req.Header["Idempotency-Key"] = []string{key}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s with Idempotency-Key %q: %s", path, key, body)
			require.Contains(t, string(body), "Idempotency-Key", "%s: the 400 names the header", path)
		}
		status, got, _ := b.do(t, "GET", fmt.Sprintf("/events/%d", id), "")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "failed", got["state"], "%s with a key retried the task", path)
	}
	// Without a key, the same retry goes ahead.
	status, got, _ = b.do(t, "POST", fmt.Sprintf("/events/%d/retry", id), "")
	require.Equal(t, http.StatusOK, status, "%v", got)
}
