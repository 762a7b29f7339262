package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// encodeURIComponent escapes s as the pages' JavaScript does before putting it in a path: every
// byte but A-Z a-z 0-9 - _ . ! ~ * ' ( ) percent-encoded.
func encodeURIComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Issue 29, 7: every referenceId the API accepts can be read back through the console's proxy
// (the pages escape it with encodeURIComponent), and what the proxy could not carry the API refuses
// at the create: a dot segment (a browser removes "..", even written %2E%2E, before the request
// leaves), a backslash (a path separator to browsers), a trailing space. A user id and an entity
// type the counter consumer accepts read back through the proxy too, however long (255 characters
// are up to 1,020 bytes).
func TestEveryAcceptedNameReadsBackThroughTheConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	a := openapitest.Handler(t, &api.Server{Stores: store.API()})
	base := serve(t, Options{API: a})

	create := func(ref string) (int, map[string]any) {
		body, _ := json.Marshal(map[string]string{"url": "https://example.com/x", "referenceId": ref})
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest("POST", "/events/async", strings.NewReader(string(body))))
		var answer map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &answer))
		return rec.Code, answer
	}
	for _, ref := range []string{".", "..", `a\b`, `\`, "r ", "a/b"} {
		status, answer := create(ref)
		require.Equal(t, http.StatusBadRequest, status, "%q: %v", ref, answer)
		require.Contains(t, answer["error"], "referenceId", ref)
	}
	for _, ref := range []string{"order-7", "...", ".r", " r", "a b?c#d%2Fe;f+g&h=i", "é😀", "'quoted' (x)*!~",
		strings.Repeat("é", 255), strings.Repeat("😀", 255)} {
		status, answer := create(ref)
		require.Equal(t, http.StatusAccepted, status, "%q: %v", ref, answer)
		status, _, body := do(t, "GET", base+"/ui/api/references/"+encodeURIComponent(ref)+"/events", "", nil)
		require.Equal(t, http.StatusOK, status, "%q: %s", ref, body)
		var got struct {
			ReferenceID string `json:"referenceId"`
			Events      []struct {
				ID float64 `json:"id"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Equal(t, ref, got.ReferenceID)
		require.Len(t, got.Events, 1, ref)
		require.Equal(t, answer["id"], got.Events[0].ID, ref)
	}

	long := strings.Repeat("é", 255)
	_, err := store.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{{EntityID: "e", EntityType: long, UserID: long, Action: exactlyonce.CounterAdded}})
	require.NoError(t, err)
	status, _, body := do(t, "GET", base+"/ui/api/counters/"+encodeURIComponent(long)+"/"+encodeURIComponent(long), "", nil)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"sum":1`)
	status, _, body = do(t, "GET", base+"/ui/api/counters/"+encodeURIComponent(long), "", nil)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"sum":1`)
}
