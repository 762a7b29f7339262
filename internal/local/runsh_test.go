package local_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/stretchr/testify/require"
)

// scripts/run.sh (`make run`) puts in WEBHOOK_ALLOW_LOOPBACK=true only when it is unset: set to
// nothing, it reaches the runner as it is, which refuses it at start as every true/false set to
// nothing (docs/configuration.md); before, ${WEBHOOK_ALLOW_LOOPBACK:-true} read it as unset and made
// it true. The runner here is a script that writes down its environment; the database, SQS and S3
// are named elsewhere, so that the script starts none of them.
func TestRunShAllowsLoopbackOnlyWhenUnset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set         bool
		value, want string
	}{{false, "", "true"}, {true, "", ""}, {true, "false", "false"}, {true, "true", "true"}} {
		dir := t.TempDir()
		runner := filepath.Join(dir, "runner.sh")
		require.NoError(t, os.WriteFile(runner, []byte("#!/bin/sh\nenv > "+filepath.Join(dir, "env")+"\n"), 0o755))
		env := []string{"LOCAL_BIN=" + runner, "DB_DSN=u:p@tcp(127.0.0.1:1)/nowhere", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1",
			"AWS_ENDPOINT_URL_S3=http://127.0.0.1:1", "WEBHOOK_SECRET=whsec_x", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		if tc.set {
			env = append(env, "WEBHOOK_ALLOW_LOOPBACK="+tc.value)
		}
		cmd := exec.Command("bash", filepath.Join(repo.Root(), "scripts", "run.sh"))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		got, err := os.ReadFile(filepath.Join(dir, "env"))
		require.NoError(t, err, "%s", out)
		var value string
		var isSet bool
		for _, kv := range strings.Split(string(got), "\n") {
			if v, ok := strings.CutPrefix(kv, "WEBHOOK_ALLOW_LOOPBACK="); ok {
				value, isSet = v, true
			}
		}
		require.True(t, isSet, "set %t to %q: the runner has it", tc.set, tc.value)
		require.Equal(t, tc.want, value, "set %t to %q", tc.set, tc.value)
	}
}

// KEEP_DB is read as every true/false is: true/1 keep the MariaDB make run started, false/0 (or
// unset) stop it, and anything else stops the run before it starts anything, naming the variable.
// Before, any value kept it: KEEP_DB=0 and KEEP_DB=false left the server running.
func TestRunShReadsKeepDBAsATrueOrFalse(t *testing.T) {
	t.Parallel()
	for value, ok := range map[string]bool{"true": true, "1": true, "false": true, "0": true, "": false, "yes": false, "no": false} {
		dir := t.TempDir()
		runner := filepath.Join(dir, "runner.sh")
		require.NoError(t, os.WriteFile(runner, []byte("#!/bin/sh\ntouch "+filepath.Join(dir, "ran")+"\n"), 0o755))
		cmd := exec.Command("bash", filepath.Join(repo.Root(), "scripts", "run.sh"))
		cmd.Env = []string{"LOCAL_BIN=" + runner, "DB_DSN=u:p@tcp(127.0.0.1:1)/nowhere", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1",
			"AWS_ENDPOINT_URL_S3=http://127.0.0.1:1", "WEBHOOK_SECRET=whsec_x", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
			"KEEP_DB=" + value}
		out, err := cmd.CombinedOutput()
		_, ranErr := os.Stat(filepath.Join(dir, "ran"))
		if ok {
			require.NoError(t, err, "KEEP_DB=%q: %s", value, out)
			require.NoError(t, ranErr, "KEEP_DB=%q: the runner ran", value)
			continue
		}
		require.Error(t, err, "KEEP_DB=%q: %s", value, out)
		require.Contains(t, string(out), "KEEP_DB must be true or false", "KEEP_DB=%q", value)
		require.True(t, os.IsNotExist(ranErr), "KEEP_DB=%q: nothing started", value)
	}
}
