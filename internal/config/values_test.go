package config_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/stretchr/testify/require"
)

// Every true/false, number and duration variable reads each class of odd value one way, the way
// docs/configuration.md states: set to nothing (or spaces) is refused at start naming it, as is
// anything that is not a value of its kind (yes, 0x10, 1_000, a duration without its unit, a
// negative one); spaces around a value are not part of it; true/false is Go's strconv.ParseBool
// (true, TRUE, True, t, 1 and their false). Each bad value is refused naming the variable and
// quoting the value, alone; each good one is taken. The table covers every such variable config.go
// reads, which the last check holds it to.
func TestEveryTypedVariableReadsOddValuesOneWay(t *testing.T) {
	t.Parallel()
	type kind struct {
		names     []string
		good, bad []string
	}
	booleans := kind{
		names: []string{"DB_IAM_AUTH", "DB_TLS", "DB_MIGRATE", "IDEMPOTENCY_REQUIRED", "WEBHOOK_ALLOW_LOOPBACK",
			"WEBHOOK_ALLOW_PRIVATE", "LOCAL_ALLOW_REMOTE"},
		good: []string{"true", " true", "true ", "TRUE", "True", "1", "t", "false", "FALSE", "0", "f", "F"},
		bad:  []string{"yes", "no", "on", "off", "2", "-1", "tru", "true\x00", "y", "enabled", "0x1", "truefalse", "\"true\""},
	}
	integers := kind{
		names: []string{"DB_PORT", "DB_MAX_OPEN_CONNS", "ALLOCATOR_BLOCK_SIZE", "SWEEP_BATCH_SIZE", "SWEEPER_SHARDS",
			"AGENT_BATCH_SIZE", "WORKER_MAX_REFERENCES", "MAPPING_CONCURRENCY", "MAPPING_BATCH_SIZE", "SHARDS_TOTAL"},
		good: []string{"2", " 2", "2 ", "02", "+2"},
		bad: []string{"0x10", "1_000", "1e1", "2.0", "2.5", "-2", "two", "2s", "١", "99999999999999999999", "2,3", "- 2",
			"\"2\""},
	}
	durations := kind{
		names: []string{"VISIBILITY_HEARTBEAT", "VISIBILITY_EXTENSION", "SWEEP_GRACE", "AGENT_PULSE_INTERVAL", "AGENT_EXPIRATION",
			"AGENT_POLL_INTERVAL", "IDEMPOTENCY_TTL", "IDEMPOTENCY_WAIT", "WEBHOOK_TIMEOUT", "RETRY_BASE", "RETRY_MAX",
			"WORKER_RETENTION", "HISTORY_RETENTION", "PROCESSOR_TIMEOUT", "ASYNC_LINGER", "SWEEP_INTERVAL",
			"ALLOCATOR_BLOCK_MAX_AGE"},
		good: []string{"5s", " 5s", "5s ", "1m30s", "1.5s", "+5s", "500ms"},
		bad:  []string{"5", "10", "-5s", "-1ns", "5 s", "5S", "5sec", "five seconds", "1e3s", "P5S", "5s5", "0x5s", "\"5s\""},
	}
	// What each variable needs beside it to be read alone: a database, and its partner.
	base := func(k, v string) map[string]string {
		m := map[string]string{"DB_DSN": "d", k: v}
		switch k {
		case "SHARDS_TOTAL":
			m["SHARDS_ASSIGNED"] = "0"
		case "HISTORY_RETENTION":
			m["HISTORY_BUCKET"] = "my-bucket"
		case "DB_PORT":
			m = map[string]string{"DB_HOST": "h", "DB_USER": "u", k: v}
		case "AGENT_EXPIRATION":
			m["AGENT_PULSE_INTERVAL"] = "1ms"
		case "VISIBILITY_EXTENSION":
			m["VISIBILITY_HEARTBEAT"] = "1ms"
		case "VISIBILITY_HEARTBEAT":
			m["VISIBILITY_EXTENSION"] = "12h"
		case "RETRY_BASE", "RETRY_MAX":
			m["RETRY_BASE"], m["RETRY_MAX"] = "1ms", "1h"
			m[k] = v
		}
		return m
	}
	load := func(vars map[string]string) error {
		_, err := config.LoadChecked(env(vars), func(k string) bool { _, ok := vars[k]; return ok })
		return err
	}
	var covered []string
	for _, kd := range []kind{booleans, integers, durations} {
		for _, k := range kd.names {
			covered = append(covered, k)
			for _, v := range kd.good {
				if k == "AGENT_EXPIRATION" && v == "500ms" {
					v = "1500ms" // milliseconds read as any duration; below 1s it is refused (TestAgent)
				}
				require.NoError(t, load(base(k, v)), "%s=%q", k, v)
			}
			for _, v := range append(kd.bad, "", " ", "\t") {
				err := load(base(k, v))
				require.Error(t, err, "%s=%q is refused", k, v)
				require.Len(t, strings.Split(err.Error(), "; "), 1, "%s=%q: one message, its own: %v", k, v, err)
				require.True(t, strings.HasPrefix(err.Error(), "configuration: "+k+" "), "%s=%q names it first: %v", k, v, err)
				if strings.TrimSpace(v) != "" {
					require.ErrorContains(t, err, fmt.Sprintf("got %q", strings.TrimSpace(v)), "%s=%q: the value quoted", k, v)
				} else {
					require.ErrorContains(t, err, k+" is set but empty", "%s=%q", k, v)
				}
			}
		}
	}

	// Every true/false, number and duration config.go reads is in the table.
	src, err := os.ReadFile("config.go")
	require.NoError(t, err)
	read := regexp.MustCompile(`p\.(flag|boolean|integer|optionalInt|intList|positive|positiveUpTo|nonNegative)\("([A-Z_]+)"`).
		FindAllStringSubmatch(string(src), -1)
	require.NotEmpty(t, read)
	for _, m := range read {
		if m[2] == "SHARDS_ASSIGNED" { // a list, TestABadShardIsOneMessage's
			continue
		}
		require.True(t, slices.Contains(covered, m[2]), "%s (p.%s) is in the table", m[2], m[1])
	}
}
