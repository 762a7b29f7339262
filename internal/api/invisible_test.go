package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// A referenceId with an invisible or formatting character (a bidi override or isolate, a
// zero-width space, a BOM, ...) is a 400 naming the field and the character, and writes nothing:
// "order-\u202E24" showed as "order-42" beside the real "order-42" in the console. A reference stored
// before the rule (written here through the store, as the API wrote it then) is still listed and
// retried by its own name, through the API.
func TestAReferenceIDWithAnInvisibleCharacterIsRefused(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	h := &api.Server{Stores: store.API()}
	for _, r := range []rune{0x202E, 0x202A, 0x2066, 0x2069, 0x200E, 0x200F, 0x061C, 0x200B, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0xE0041, 0x2028, 0x3164} {
		ref := "order-" + string(r) + "24"
		body, err := json.Marshal(map[string]string{"url": "https://example.com/x", "referenceId": ref})
		require.NoError(t, err)
		status, answer := serve(t, h, "POST", "/events/async", string(body))
		require.Equal(t, http.StatusBadRequest, status, "U+%04X: %v", r, answer)
		require.Contains(t, answer["error"], "referenceId must not contain invisible or formatting characters")
		require.Contains(t, answer["error"], fmt.Sprintf("U+%04X at character 7", r))
	}
	n, err := store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "a refused create writes nothing")

	// Stored before the rule: read and retried by its name.
	stored := "order-\u202E24"
	created, err := store.Tasks.CreateTasks(context.Background(), []exactlyonce.NewTask{{URL: "https://example.com/x", ReferenceID: stored}})
	require.NoError(t, err)
	status, list := serve(t, h, "GET", "/references/"+stored+"/events", "")
	require.Equal(t, http.StatusOK, status, "%v", list)
	require.Equal(t, stored, list["referenceId"])
	require.Len(t, list["events"], 1)
	require.Equal(t, float64(created[0].ID), list["events"].([]any)[0].(map[string]any)["id"])
	status, retried := serve(t, h, "POST", "/references/"+stored+"/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", retried)
	require.Equal(t, stored, retried["referenceId"])
}
