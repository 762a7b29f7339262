package rie

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/repo"
)

// UnloadableAWS is an AWS configuration that cannot be loaded: AWS_MAX_ATTEMPTS=x, which both
// config.LoadDefaultConfig and Lambda's own configuration (internal/awsenv) refuse at the load, the
// first client's build, and not at init; with the region, keys, endpoints (an unused port) and the
// archive's bucket (HISTORY_BUCKET) a function would otherwise have. A function's start-up test runs
// under it to show that its init builds no AWS client: each would fail it.
var UnloadableAWS = []string{
	"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_MAX_ATTEMPTS=x",
	"AWS_ENDPOINT_URL_SQS=http://127.0.0.1:9",
	"HISTORY_BUCKET=history", "AWS_ENDPOINT_URL_S3=http://127.0.0.1:9",
}

// SkipShort skips a test that builds the function's bootstrap with -short: call it before what the
// test sets up for StartTest (a database).
func SkipShort(t testing.TB, function string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("builds the %s function's bootstrap", function)
	}
}

// StartTest builds functions/<function> of this repository as the deployment does (BuildBootstrap)
// and starts it under the emulator with env and a 30 s timeout, stopped at the test's end. It skips
// the test with -short (SkipShort).
func StartTest(t testing.TB, function string, env ...string) *Function {
	t.Helper()
	SkipShort(t, function)
	bootstrap, err := BuildBootstrap(context.Background(), repo.Root(), function, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := Start(Config{Bootstrap: bootstrap, Function: function, Timeout: 30 * time.Second, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// InvokeSample invokes f with the event of the repository's events/<sample> and returns the result,
// failing the test when the invocation or the function failed.
func (f *Function) InvokeSample(t testing.TB, sample string) Result {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", sample))
	if err != nil {
		t.Fatal(err)
	}
	// A bound, not a pause: the invocation returns as soon as the function answers.
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout+time.Minute)
	defer cancel()
	res, err := f.Invoke(ctx, raw, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil {
		t.Fatalf("%s: %v\n%s", sample, res.Error, strings.Join(f.Output(), "\n"))
	}
	return res
}
