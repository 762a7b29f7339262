package infra

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"
)

// Tests of nag.go (the accepted findings) and of the AwsSolutions checks app.go runs.

// TestCDKNag: the AwsSolutions pack ran on every variant and left no unsuppressed error or warning.
func TestCDKNag(t *testing.T) {
	pattern := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	for _, v := range []variant{variantAWS, variantPublic, variantLocalStack, variantTwoNATs} {
		s := synth(t, v)
		for _, m := range *s.annotations.FindError(jsii.String("*"), pattern) {
			t.Errorf("%s: cdk-nag error at %s: %v", v, *m.Id, m.Entry.Data)
		}
		for _, m := range *s.annotations.FindWarning(jsii.String("*"), pattern) {
			t.Errorf("%s: cdk-nag warning at %s: %v", v, *m.Id, m.Entry.Data)
		}
		// Every suppression says why, in a sentence. This walks the raw template: the metadata sits on
		// resources of any type, and the Template API's finders and matchers work one type at a time.
		n := 0
		for id, r := range s.resources() {
			md, _ := r.(map[string]any)["Metadata"].(map[string]any)
			nagMD, _ := md["cdk_nag"].(map[string]any)
			for _, raw := range asList(nagMD["rules_to_suppress"]) {
				rule := raw.(map[string]any)
				n++
				if reason, _ := rule["reason"].(string); len(reason) < 40 {
					t.Errorf("%s: suppression %v on %s has no real reason: %q", v, rule["id"], id, reason)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no cdk-nag suppression metadata found; did the suppressions get lost?", v)
		}
	}
}

// TestCDKNagCatchesFindings proves the nag wiring can fail: the same checks on a deliberately
// non-compliant stack report errors that the assertion of TestCDKNag would see.
func TestCDKNagCatchesFindings(t *testing.T) {
	app := newApp(t, nil)
	stack := awscdk.NewStack(app, jsii.String("Bad"), nil)
	awssqs.NewCfnQueue(stack, jsii.String("PlainQueue"), &awssqs.CfnQueueProps{})
	addNagChecks(app)
	errs := assertions.Annotations_FromStack(stack).FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-SQS.*")))
	if len(*errs) == 0 {
		t.Errorf("cdk-nag reported nothing for an unencrypted queue without TLS enforcement or DLQ")
	}
}
