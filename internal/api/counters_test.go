package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// GET /counters/{userId} and /counters/{userId}/{entityType}: the counts as the consumer left
// them; an unknown count is 0 at version 0; a user id or type out of bounds is a 400 naming it.
func TestCounterRoutes(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	_, err := store.Counters.ApplyCounterMessages(context.Background(), []exactlyonce.CounterMessage{
		{EntityID: "m1", EntityType: "message", UserID: "ann", Action: "added"},
		{EntityID: "m2", EntityType: "message", UserID: "ann", Action: "added"},
		{EntityID: "m1", EntityType: "message", UserID: "ann", Action: "readed"},
		{EntityID: "d1", EntityType: "dialog", UserID: "ann", Action: "added"},
		{EntityID: "d1", EntityType: "dialog", UserID: "bob", Action: "added"},
	})
	require.NoError(t, err)
	h := &api.Server{Stores: store.API()}

	code, got := serve(t, h, "GET", "/counters/ann", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "ann", "counters": map[string]any{
		"message": map[string]any{"sum": 1.0, "version": 3.0},
		"dialog":  map[string]any{"sum": 1.0, "version": 1.0},
	}}, got)
	code, got = serve(t, h, "GET", "/counters/ann/message", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "ann", "entityType": "message", "sum": 1.0, "version": 3.0}, got)
	code, got = serve(t, h, "GET", "/counters/nobody/message", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "nobody", "entityType": "message", "sum": 0.0, "version": 0.0}, got)
	code, got = serve(t, h, "GET", "/counters/nobody", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "nobody", "counters": map[string]any{}}, got)

	code, got = serve(t, h, "GET", "/counters/"+strings.Repeat("x", 256), "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "userId must be 1 to 255 characters, got 256", got["error"])
	code, got = serve(t, h, "GET", "/counters/ann/"+strings.Repeat("é", 256), "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "entityType must be 1 to 255 characters, got 256", got["error"])
	// What the counter consumer refuses to count, a read refuses too.
	for path, want := range map[string]string{
		"/counters/ann ":         "userId must not end with a space",
		"/counters/ann/message ": "entityType must not end with a space",
		"/counters/..":           `userId must not be "." or ".."`,
		"/counters/ann/.":        `entityType must not be "." or ".."`,
		`/counters/a\b/message`:  `userId must not contain '/' or '\'`,
		"/counters/ann/\xff":     "entityType must be valid UTF-8",
	} {
		code, got = serve(t, h, "GET", path, "")
		require.Equal(t, http.StatusBadRequest, code, path)
		require.True(t, strings.HasPrefix(got["error"].(string), want), "%s: %v", path, got)
	}
	code, _ = serve(t, h, "POST", "/counters/ann", "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
}
