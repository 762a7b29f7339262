package infra

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Build adds the stack to app and runs the cdk-nag AwsSolutions checks on it at synth time, so
// `make synth` fails on an unsuppressed finding exactly as `make test-infra` does.
func Build(app awscdk.App, cfg Config) (*ExactlyOnceStack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkAssets(cfg.AssetDir); err != nil {
		return nil, err
	}
	stack := NewExactlyOnceStack(app, StackName, &ExactlyOnceStackProps{Config: cfg})
	addNagChecks(app)
	return stack, nil
}

// addNagChecks runs the AwsSolutions pack over everything in app when it is synthesised. Findings
// become error/warning annotations: the CDK CLI fails `cdk synth` on errors.
func addNagChecks(app awscdk.App) {
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose: jsii.Bool(true),
		Reports: jsii.Bool(false),
	}), nil)
}

// checkAssets fails early, with the fix in the message, when a function has not been built.
func checkAssets(dir string) error {
	for _, name := range FunctionNames {
		p := filepath.Join(dir, name, "bootstrap")
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("missing Lambda bootstrap %s (run `make lambdas` first): %w", p, err)
		}
	}
	return nil
}
