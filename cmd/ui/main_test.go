package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The console is served on loopback only, unless the operator says otherwise, and the refusal says why.
func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"127.0.0.1:8081", "localhost:8081", "[::1]:8081", "127.0.0.2:0"} {
		require.NoError(t, checkAddr(a, ""), a)
	}
	for _, a := range []string{"0.0.0.0:8081", ":8081", "192.168.1.5:8081", "example.com:8081"} {
		err := checkAddr(a, "")
		require.ErrorContains(t, err, "is not a loopback address", a)
		require.ErrorContains(t, err, "UI_ALLOW_REMOTE=true", a)
		require.NoError(t, checkAddr(a, "true"), a)
	}
	require.ErrorContains(t, checkAddr("8081", ""), "want host:port")
	// UI_ALLOW_REMOTE reads as every true/false: a value it cannot read is refused, naming it,
	// on loopback too, where "yes" was read as false without a word.
	for _, v := range []string{"yes", "on", "2", "tru"} {
		for _, a := range []string{"0.0.0.0:8081", "127.0.0.1:8081"} {
			require.EqualError(t, checkAddr(a, v), `UI_ALLOW_REMOTE must be true or false, got "`+v+`"`, "%s %s", a, v)
		}
	}
	for _, v := range []string{"TRUE", "1", " true "} {
		require.NoError(t, checkAddr("0.0.0.0:8081", v), v)
	}
	for _, v := range []string{"false", "0", " ", ""} {
		require.ErrorContains(t, checkAddr("0.0.0.0:8081", v), "is not a loopback address", v)
	}
}

// API_URL is required; a non-loopback UI_ADDR is refused before anything else happens.
func TestRunRefusals(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	require.ErrorContains(t, run(context.Background(), env(nil), nil, log), "API_URL is required")
	require.ErrorContains(t, run(context.Background(), env(map[string]string{"API_URL": "https://a.execute-api.eu-west-1.amazonaws.com/prod/",
		"UI_ADDR": "0.0.0.0:0"}), nil, log), "not a loopback address")
}

// A UI_ variable the console does not read is a typo, named at start, before credentials are looked
// for (before: ignored, and UI_ALLOW_REMOT=true left the console on loopback without a word). The
// metadata service is turned off, so that a regression stays on this machine.
func TestAnUnknownUIVariableIsRefused(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lookup := func(k string) (string, bool) {
		v, ok := map[string]string{"API_URL": "https://a.execute-api.eu-west-1.amazonaws.com/v1/"}[k]
		return v, ok
	}
	require.ErrorContains(t, run(context.Background(), lookup, []string{"PATH=/bin", "UI_ADDR=127.0.0.1:0", "UI_ALLOW_REMOT=true"}, log),
		"UI_ALLOW_REMOT is not a setting of the console")
}

// A plain-http or malformed API_URL is refused before credentials are looked for: the SDK's chain
// would otherwise ask the instance metadata service first, and the operator would read about
// credentials instead of the URL. (The metadata service is turned off here all the same, so that a
// regression stays on this machine.)
func TestABadAPIURLIsRefusedFirst(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	require.ErrorContains(t, run(context.Background(), env(map[string]string{"API_URL": "http://example.com/prod/"}), nil, log),
		"https is required")
	require.ErrorContains(t, run(context.Background(), env(map[string]string{"API_URL": "https://user@a.example/prod/?x=1"}), nil, log),
		"nothing else")
}

// The default queues are the stack's, as infra/ names them.
func TestDefaultQueues(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"ExactlyOnce-events", "ExactlyOnce-counters"}, defaultQueues("ExactlyOnce"))
	require.Equal(t, []string{"a", "b"}, split(" a, ,b,"))
	require.Equal(t, "abc.execute-api.eu-west-1.amazonaws.com", hostOf("https://abc.execute-api.eu-west-1.amazonaws.com/prod/"))
}

// FUNCTIONS names the functions whose CloudWatch metrics give the rates, by path; a malformed one
// stops the console before anything else happens.
func TestFunctions(t *testing.T) {
	t.Parallel()
	got, err := parseFunctions(" api=ExactlyOnce-ApiFunction-a , processor=P,sweeper=S")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"api": "ExactlyOnce-ApiFunction-a", "processor": "P", "sweeper": "S"}, got)
	require.Equal(t, "CloudWatch, api=ExactlyOnce-ApiFunction-a, processor=P, sweeper=S", describeFunctions(got))
	got, err = parseFunctions("")
	require.NoError(t, err)
	require.Empty(t, got)
	require.Contains(t, describeFunctions(got), "set FUNCTIONS=")
	for in, want := range map[string]string{
		"processor":           "want api=<name>",
		"processor=":          "want api=<name>",
		"agent=A":             `unknown path "agent"`,
		"api=A,api=B":         "api is named twice",
		"processor=P;sweeper": "is not a Lambda function's name",
		"api=arn:aws:lambda:eu-west-1:1:function:A": "is not a Lambda function's name",
	} {
		_, err := parseFunctions(in)
		require.ErrorContains(t, err, want, in)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err = run(context.Background(), func(k string) (string, bool) {
		v, ok := map[string]string{"API_URL": "https://a.execute-api.eu-west-1.amazonaws.com/prod/", "FUNCTIONS": "worker=W"}[k]
		return v, ok
	}, nil, log)
	require.ErrorContains(t, err, `FUNCTIONS: unknown path "worker"`)
}

// The ApiUrl an operator is shown as an example (the error without API_URL, this command's
// documentation, the console's page) ends with the stage the stack deploys (infra.APIStageName,
// read from infra/api.go: infra is its own module), so that an operator who copies it reaches the
// API: it said /prod/ where the stack's stage is v1.
func TestTheExampleAPIURLHasTheStacksStage(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../infra/api.go")
	require.NoError(t, err)
	m := regexp.MustCompile(`const APIStageName = "([^"]+)"`).FindSubmatch(src)
	require.NotNil(t, m, "infra/api.go declares APIStageName")
	want := "amazonaws.com/" + string(m[1]) + "/"

	err = run(context.Background(), func(string) (string, bool) { return "", false }, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorContains(t, err, want)
	for _, f := range []string{"main.go", "../../docs/console.md"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, u := range regexp.MustCompile(`execute-api\.<region>\.amazonaws\.com/[^/\s]*/`).FindAll(b, -1) {
			require.Contains(t, string(u), want, f)
		}
	}
}
