package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// GET /events/{id}/attempts answers a page at a time: a task keeps its attempts across manual
// retries (each retry adds up to maxRetries+1), so 2,345 attempts with errors of 1,024 '<' (six
// bytes each as JSON writes them: 6 KiB an attempt) are pages that end before 4 MiB, each saying
// where the next begins, and every attempt comes once, in order. Before the pages, one answer held
// every attempt: 14 MB here, past the 6 MB a Lambda answers.
func TestAttemptsComeInPagesBoundedInBytes(t *testing.T) {
	t.Parallel()
	core := testdb.Core(t, mysql.Config{}, 4)
	store := wire.NewStores(core)
	ctx := context.Background()
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: "http://127.0.0.1:1/a", Payload: json.RawMessage(`{}`), MaxRetries: 3}})
	require.NoError(t, err)
	id := created[0].ID
	const n = 2345
	require.NoError(t, mysqltest.LoadAttempts(ctx, core.Pool(), id, 1, n, strings.Repeat("<", 1024)))
	s := &api.Server{Stores: store.API()}
	h := openapitest.Handler(t, s)

	var numbers []int
	path := fmt.Sprintf("/events/%d/attempts", id)
	for pages := 0; ; pages++ {
		require.Less(t, pages, n, "the pages never end")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.LessOrEqual(t, rec.Body.Len(), api.MaxListPayloadBytes+1024, "a page of %s", path)
		var page struct {
			Attempts []api.AttemptJSON `json:"attempts"`
			Next     *int              `json:"next"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
		require.NotEmpty(t, page.Attempts)
		for _, a := range page.Attempts {
			numbers = append(numbers, a.Number)
		}
		if page.Next == nil {
			break
		}
		require.Equal(t, page.Attempts[len(page.Attempts)-1].Number, *page.Next)
		path = fmt.Sprintf("/events/%d/attempts?after=%d", id, *page.Next)
	}
	require.Len(t, numbers, n)
	for i, k := range numbers {
		require.Equal(t, i+1, k, "every attempt once, in order")
	}

	// limit: a page of 10, then the next 10.
	var page struct {
		Attempts []api.AttemptJSON `json:"attempts"`
		Next     *int              `json:"next"`
	}
	getJSON(t, s, path[:strings.Index(path, "?")]+"?limit=10", http.StatusOK, &page)
	require.Len(t, page.Attempts, 10)
	require.NotNil(t, page.Next)
	require.Equal(t, 10, *page.Next)
	getJSON(t, s, fmt.Sprintf("/events/%d/attempts?after=10&limit=10", id), http.StatusOK, &page)
	require.Equal(t, 11, page.Attempts[0].Number)
	// Past the last attempt: none, and no next.
	getJSON(t, s, fmt.Sprintf("/events/%d/attempts?after=%d", id, n), http.StatusOK, &page)
	require.Empty(t, page.Attempts)
	require.Nil(t, page.Next)

	var e struct{ Error string }
	for bad, says := range map[string]string{
		"after=-1": "after must be an attempt number", "after=x": "after must be an attempt number",
		"after=01": "after must be an attempt number",
		// Too large for an attempt number: "out of range", as api.md says of every after, before,
		// id and limit, not "must be an integer of 0 or more", which it is.
		"after=99999999999":          "after 99999999999 is out of range: an attempt number is at most 2147483647",
		"after=99999999999999999999": "after 99999999999999999999 is out of range",
		"after=2147483648":           "after 2147483648 is out of range",
		"limit=0":                    "limit 0 is out of range", "limit=1001": "limit 1001 is out of range",
		"limit=5&limit=6": "limit", "before=3": "unknown query parameter",
	} {
		getJSON(t, s, fmt.Sprintf("/events/%d/attempts?%s", id, bad), http.StatusBadRequest, &e)
		require.Contains(t, e.Error, says, bad)
	}
}
