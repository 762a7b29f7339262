package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/stretchr/testify/require"
)

// refuse is work that always fails.
type refuse struct{}

func (refuse) Inline() bool { return true }
func (refuse) Do(context.Context, exactlyonce.Event) (exactlyonce.Result, error) {
	return exactlyonce.Result{}, errors.New("the value generator is broken")
}

// An event whose work fails shows its attempts, its last error and when it is tried again; once its
// attempts are spent it shows as failed, with the reason.
func TestGetShowsAFailingAndAFailedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id, err := b.store.Events.CreatePending(ctx)
	require.NoError(t, err)
	e := &processing.Engine{Store: b.store.Events, TaskStore: b.store.Tasks, By: exactlyonce.BySweeper, Works: exactlyonce.Works{exactlyonce.KindPlain: refuse{}},
		Backoff: exactlyonce.Backoff{MaxAttempts: 2, Base: time.Hour, Max: time.Hour}}

	_, err = e.ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	status, body, _ := b.do(t, "GET", "/events/"+jsonID(id), "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "pending", body["state"])
	require.EqualValues(t, 1, body["attempts"])
	require.Equal(t, "the value generator is broken", body["lastError"])
	next, err := time.Parse(time.RFC3339Nano, body["nextAttemptAt"].(string))
	require.NoError(t, err)
	require.True(t, next.After(time.Now()), "it waits its backoff")

	// The backoff over (moved back by hand: an hour is the test's way to keep the first wait), the
	// second attempt is the last.
	_, err = b.store.DB.Pool().Exec("UPDATE events SET next_attempt_at = NOW(6) WHERE id = ?", id)
	require.NoError(t, err)
	out, err := e.ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeFailed, out[id])
	status, body, _ = b.do(t, "GET", "/events/"+jsonID(id), "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "failed", body["state"])
	require.EqualValues(t, 2, body["attempts"])
	require.Equal(t, "the value generator is broken", body["lastError"])
	require.Nil(t, body["value"])
	require.NotContains(t, body, "nextAttemptAt")
	require.Equal(t, exactlyonce.BySweeper, body["processedBy"])
}
