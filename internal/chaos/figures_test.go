package chaos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A run that retried no transaction fails when retries are required (the retry helper's retry
// branch must run under chaos), and the figures are summed over every role, the APIs' included.
func TestFiguresRequireRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retired map[string]*ProcessStats
		require bool
		fails   bool
	}{
		{"no retry, required", map[string]*ProcessStats{RoleProcessor: {Received: 5}}, true, true},
		{"no retry, not required", map[string]*ProcessStats{RoleProcessor: {Received: 5}}, false, false},
		{"retried by the API", map[string]*ProcessStats{RoleAPI: {LockWaitTimeouts: 1, Retries: 1}, RoleProcessor: {Received: 5}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &run{cfg: Config{RequireRetries: tc.require}, retired: tc.retired}
			r.figures()
			violated := strings.Contains(strings.Join(r.report.Violations, "\n"), "no transaction was retried")
			require.Equal(t, tc.fails, violated, "%q", r.report.Violations)
			require.EqualValues(t, 5, r.report.Received, "summed over the roles")
		})
	}
}
