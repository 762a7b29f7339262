package boot_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The migrate function's bootstrap links none of the SDK clients and components it never runs:
// every package a bootstrap links is initialised at each cold start, and the SQS, S3 and Secrets
// Manager clients alone took more than a millisecond of it (docs/performance.md, "Lambda
// start-up"). It imports boot, not internal/wire.
func TestMigrateFunctionLinksNoClientItDoesNotUse(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/exactlyonce/exactlyonce/functions/migrate").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/exactlyonce/exactlyonce/internal/wire/boot"] {
		t.Fatalf("the dependency list does not hold boot: it is not read right:\n%s", out)
	}
	for _, p := range []string{
		"github.com/aws/aws-sdk-go-v2/service/sqs",
		"github.com/aws/aws-sdk-go-v2/service/s3",
		"github.com/aws/aws-sdk-go-v2/service/secretsmanager",
		"github.com/exactlyonce/exactlyonce/internal/wire",
		"github.com/exactlyonce/exactlyonce/internal/processing",
	} {
		if deps[p] {
			t.Errorf("the migrate function links %s", p)
		}
	}
}
