package boot_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// sdkService is the prefix of the AWS SDK's service clients' packages.
const sdkService = "github.com/aws/aws-sdk-go-v2/service/"

// fullLoader is config.LoadDefaultConfig's package: with it, a bootstrap links the service clients
// of its credential chain (web identity and assumed roles: STS; SSO: SSO and SSO OIDC; console
// sign-in: Signin). A bootstrap loads Lambda's configuration instead (internal/awsenv).
const fullLoader = "github.com/aws/aws-sdk-go-v2/config"

// Each function's bootstrap links the AWS SDK service clients it calls and no other: every package
// a bootstrap links is initialised at each cold start (each client's endpoint rules compile their
// regular expressions, each client's schemas are built), 0.1-0.25 ms per client, and the bootstraps'
// start-up is judged against a hello world's (docs/performance.md, "Lambda start-up"). The migrate
// function imports boot, not internal/wire; the api and counter functions deliver no task, so they
// do not link Secrets Manager (internal/wire/delivery holds what reads the webhook's secret); none
// links config.LoadDefaultConfig's credential chain (internal/awsenv).
func TestFunctionsLinkOnlyTheClientsTheyCall(t *testing.T) {
	t.Parallel()
	for fn, want := range map[string][]string{
		"api":       {"s3", "sqs"},
		"counter":   {"s3", "sqs"},
		"migrate":   nil,
		"processor": {"s3", "secretsmanager", "sqs"},
		"sweeper":   {"s3", "secretsmanager", "sqs"},
	} {
		t.Run(fn, func(t *testing.T) {
			t.Parallel()
			deps := linked(t, fn)
			var got []string
			for _, p := range deps {
				if s, ok := strings.CutPrefix(p, sdkService); ok && !strings.Contains(s, "/") && s != "internal" {
					got = append(got, s)
				}
			}
			if slices.Contains(deps, fullLoader) {
				t.Errorf("the %s function links %s", fn, fullLoader)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("the %s function links the service clients %v, want %v", fn, got, want)
			}
			if fn == "migrate" {
				for _, p := range []string{"github.com/exactlyonce/exactlyonce/internal/wire",
					"github.com/exactlyonce/exactlyonce/internal/processing"} {
					if slices.Contains(deps, p) {
						t.Errorf("the migrate function links %s", p)
					}
				}
			}
		})
	}
}

// linked lists the packages the function's bootstrap links, as the deployment builds it.
func linked(t *testing.T, fn string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", "lambda.norpc", "-deps",
		"github.com/exactlyonce/exactlyonce/functions/"+fn).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/exactlyonce/exactlyonce/internal/wire/boot") {
		t.Fatalf("the dependency list does not hold boot: it is not read right:\n%s", out)
	}
	return deps
}
