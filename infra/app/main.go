// Command app is the CDK app of exactlyonce, the first user of the infra package's constructs.
// cdk.json (at the repository root) runs it from the repository root, so relative paths
// (build/lambda) are relative to it.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/exactlyonce/exactlyonce/infra"
)

func main() {
	defer jsii.Close()

	app := awscdk.NewApp(nil)
	cfg, err := infra.ConfigFromContext(app.Node())
	if err == nil {
		_, err = infra.Build(app, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	app.Synth(nil)
}
