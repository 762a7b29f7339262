package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnvAsyncLinger(t *testing.T) {
	t.Parallel()
	o, err := Env(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, DefaultAsyncLinger, o.AsyncLinger, "default")

	o, err = Env(envOf(map[string]string{"ASYNC_LINGER": "20ms"}))
	require.NoError(t, err)
	require.Equal(t, 20*time.Millisecond, o.AsyncLinger)

	o, err = Env(envOf(map[string]string{"ASYNC_LINGER": "0"}))
	require.NoError(t, err)
	require.Negative(t, o.AsyncLinger, "0 turns the linger off: answer after the send")

	for _, bad := range []string{"-1s", "5", "soon"} {
		_, err = Env(envOf(map[string]string{"ASYNC_LINGER": bad}))
		require.ErrorContains(t, err, "ASYNC_LINGER must be", "ASYNC_LINGER=%s", bad)
	}
}
