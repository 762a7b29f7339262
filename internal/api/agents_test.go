package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

// GET /agents lists the registered agents ordered by id, with their state, assignment and times.
func TestGetAgents(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	a, err := store.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "a", Kind: "standalone", Sharding: exactlyonce.ShardingDynamic}, time.Minute)
	require.NoError(t, err)
	b, err := store.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "b", Kind: "sweeper", Sharding: exactlyonce.ShardingDynamic}, time.Minute)
	require.NoError(t, err)
	_, err = store.Agents.AssignAgent(ctx, a.ID, exactlyonce.AgentRunning, new(2), new(0))
	require.NoError(t, err)

	rec := httptest.NewRecorder()
	openapitest.Handler(t, &api.Server{Stores: store.API()}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/agents", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var got struct {
		Agents []map[string]any `json:"agents"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.Len(t, got.Agents, 2)
	require.EqualValues(t, a.ID, got.Agents[0]["id"])
	require.Equal(t, "a", got.Agents[0]["name"])
	require.Equal(t, "standalone", got.Agents[0]["kind"])
	require.Equal(t, "dynamic", got.Agents[0]["sharding"])
	require.Equal(t, "RUNNING", got.Agents[0]["state"])
	require.EqualValues(t, 2, got.Agents[0]["totalShardCount"])
	require.EqualValues(t, 0, got.Agents[0]["assignedShardIndex"])
	require.EqualValues(t, b.ID, got.Agents[1]["id"])
	require.Equal(t, "WAITING", got.Agents[1]["state"])
	require.Nil(t, got.Agents[1]["totalShardCount"])
	require.Equal(t, "sweeper", got.Agents[1]["kind"])
	for _, k := range []string{"expiration", "createdAt", "lastPulseAt"} {
		require.NotEmpty(t, got.Agents[1][k], k)
	}

	rec = httptest.NewRecorder()
	openapitest.Handler(t, &api.Server{Stores: store.API()}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/agents", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	require.Equal(t, "GET", rec.Header().Get("Allow"))
}
