package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/stretchr/testify/require"
)

// make invoke FN=<function> sends every sample of the function: each file of events/ is one
// function's (named <function>.json or <function>-*.json), and each function has one at least.
func TestEverySampleBelongsToOneFunction(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(repo.Root(), "functions"))
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		got, err := samples(repo.Root(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Errorf("function %s has no sample in events/", e.Name())
		}
		for _, p := range got {
			if o, ok := owner[p]; ok {
				t.Errorf("%s is both %s's and %s's sample", p, o, e.Name())
			}
			owner[p] = e.Name()
		}
	}
	all, err := filepath.Glob(filepath.Join(repo.Root(), "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if owner[p] == "" {
			t.Errorf("%s is no function's sample: make invoke never sends it (name it <function>-*.json)", filepath.Base(p))
		}
	}
}

// The function reads the database as `make run` does: DB_NAME=newcomer make invoke uses the
// database newcomer on make run's server (it was passed beside the default DB_DSN, and the
// function stopped at init: "DB_NAME would be ignored"); DB_HOST and its parts pass as they are,
// with no DB_DSN beside them (which the function would refuse too); DB_DSN passes once, alone.
func TestTheFunctionReadsTheDatabaseAsMakeRunDoes(t *testing.T) {
	env := func(kv ...string) []string {
		m := map[string]string{}
		for _, s := range kv {
			k, v, _ := strings.Cut(s, "=")
			m[k] = v
		}
		return functionEnv(append(kv, "HOME=/root"), func(k string) string { return m[k] })
	}
	require.Equal(t, []string{"DB_DSN=" + config.LocalDSN}, env())
	require.Equal(t, []string{"DB_MIGRATE=false", "DB_DSN=me:pw@tcp(127.0.0.1:3307)/newcomer"},
		env("DB_NAME=newcomer", "DB_PORT=3307", "DB_USER=me", "DB_PASSWORD=pw", "DB_MIGRATE=false"))
	require.Equal(t, []string{"DB_HOST=db.example", "DB_USER=u", "DB_NAME=n"}, env("DB_HOST=db.example", "DB_USER=u", "DB_NAME=n"))
	require.Equal(t, []string{"DB_DSN=u:p@tcp(h:3306)/d"}, env("DB_DSN=u:p@tcp(h:3306)/d"))
	require.Equal(t, []string{"DB_NAME=n", "DB_DSN=u:p@tcp(h:3306)/d"}, env("DB_DSN=u:p@tcp(h:3306)/d", "DB_NAME=n"),
		"DB_NAME beside DB_DSN is the function's to refuse, as make run refuses it")
}

// A function that functions/ does not have is named as such, with the ones it has, before anything
// is built or started: FN=nope said "no events/nope*.json sample: name one with -event", and with
// EVENT= it went on to a go build error about a directory.
func TestAnUnknownFunctionIsRefusedByName(t *testing.T) {
	for _, event := range []string{"", filepath.Join(repo.Root(), "events", "api.json")} {
		for _, fn := range []string{"nope", "../cmd/local", "."} {
			err := run(fn, event, "", time.Second)
			require.Error(t, err, fn)
			require.ErrorContains(t, err, "no function", fn)
			require.ErrorContains(t, err, "api, counter, migrate, processor, sweeper", fn)
		}
	}
}

// `make invoke` adds WEBHOOK_ALLOW_LOOPBACK=true only when it is unset: set to nothing, it is passed
// on as it is, and the function refuses it at start as every true/false set to nothing; before, it
// was read as unset and made true. A value set is the caller's.
func TestAllowLoopbackAddedOnlyWhenUnset(t *testing.T) {
	defaults := func(kv ...string) []string {
		m := map[string]string{}
		for _, s := range kv {
			k, v, _ := strings.Cut(s, "=")
			m[k] = v
		}
		env, _ := webhookDefaults(kv, func(k string) string { return m[k] })
		return env
	}
	require.Equal(t, []string{"WEBHOOK_SECRET=" + devWebhookSecret, "WEBHOOK_ALLOW_LOOPBACK=true"}, defaults())
	require.Equal(t, []string{"WEBHOOK_SECRET=" + devWebhookSecret}, defaults("WEBHOOK_ALLOW_LOOPBACK="))
	require.Equal(t, []string{"WEBHOOK_SECRET=" + devWebhookSecret}, defaults("WEBHOOK_ALLOW_LOOPBACK=false"))
	require.Equal(t, []string{"WEBHOOK_ALLOW_LOOPBACK=true"}, defaults("WEBHOOK_SECRET_ARN=arn:x"))
	require.Contains(t, functionEnv([]string{"WEBHOOK_ALLOW_LOOPBACK="}, func(string) string { return "" }), "WEBHOOK_ALLOW_LOOPBACK=",
		"passed on, for the function to refuse")
}
