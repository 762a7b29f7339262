package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Every test reads a template synthesised once per variant (see helpers_test.go). Resources are found
// by type and properties, or through the constructs of ExactlyOnceStack (their Ref/GetAtt tokens);
// no logical ID is written down.

func TestSynthNeedsNoAccountOrLookups(t *testing.T) {
	for _, v := range []variant{variantAWS, variantLocalStack} {
		s := synth(t, v)
		if s.missing != 0 {
			t.Errorf("%s: synthesis asked for %d context lookups; it must need no AWS account or network", v, s.missing)
		}
		if got := *s.stack.Environment(); got != "aws://unknown-account/unknown-region" {
			t.Errorf("%s: stack environment %q, want environment-agnostic", v, got)
		}
		if got := *s.stack.StackName(); got != StackName {
			t.Errorf("%s: stack name %q, want %q (cdk.out/%s.template.json)", v, got, StackName, StackName)
		}
	}
}

// TestSQSEndpointPolicy: through the endpoint, the api may send to the main queue and the processor
// extend visibility there; nothing else.
func TestSQSEndpointPolicy(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	mainArn := getAtt(s.ref(t, s.stack.Queues.Main.QueueUrl()), "Arn")
	// Exactly one endpoint, so each check below is about that one.
	must(t, "one VPC endpoint", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::VPCEndpoint"), jsii.Number(1)) })
	statements := assertions.NewCapture(nil)
	must(t, "endpoint policy", func() {
		tpl.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
			"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{"Statement": statements})),
		}))
	})
	if n := len(*statements.AsArray()); n != 2 {
		t.Errorf("SQS endpoint policy has %d statements, want 2: %s", n, mustJSON(statements.AsArray()))
	}
	for _, use := range []struct {
		fn     awslambda.Function
		action string
	}{{s.stack.Functions.API, "sqs:SendMessage"}, {s.stack.Functions.Processor, "sqs:ChangeMessageVisibility"}} {
		check(t, "endpoint allows "+use.action+" to "+*use.fn.Node().Id()+"'s role only, on the main queue only", func() {
			tpl.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
				"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
					// Within arrayWith a plain object matches exactly: no other principal, action or resource.
					"Statement": assertions.Match_ArrayWith(arr(map[string]any{
						"Effect":    "Allow",
						"Action":    use.action,
						"Principal": map[string]any{"AWS": getAtt(s.ref(t, use.fn.Role().RoleName()), "Arn")},
						"Resource":  mainArn,
					})),
				})),
			}))
		})
	}
}

func TestMigrateTriggerRunsAfterDatabase(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	triggers := tpl.FindResources(jsii.String("Custom::Trigger"), nil)
	if len(*triggers) != 1 {
		t.Fatalf("%d Custom::Trigger resources, want 1", len(*triggers))
	}
	migrateID := s.ref(t, s.stack.Functions.Migrate.FunctionName())
	for _, r := range *triggers {
		trig := *r
		p := trig["Properties"].(map[string]any)
		// The handler is a version of the migrate function.
		versionRef, _ := p["HandlerArn"].(map[string]any)
		versionID, _ := versionRef["Ref"].(string)
		version := s.resource(t, versionID)
		if version["Type"] != "AWS::Lambda::Version" || mustJSON(props(version)["FunctionName"]) != mustJSON(map[string]any{"Ref": migrateID}) {
			t.Errorf("trigger handler %s is not a version of the migrate function", versionID)
		}
		if p["InvocationType"] != "RequestResponse" {
			t.Errorf("trigger invocation %v, want RequestResponse (so a migrate error fails the deploy)", p["InvocationType"])
		}
		if p["ExecuteOnHandlerChange"] != true {
			t.Errorf("trigger ExecuteOnHandlerChange %v, want true", p["ExecuteOnHandlerChange"])
		}
		var timeoutMs float64
		fmt.Sscan(fmt.Sprint(p["Timeout"]), &timeoutMs)
		fnTimeout := props(s.resource(t, migrateID))["Timeout"].(float64)
		if timeoutMs < fnTimeout*1000 {
			t.Errorf("trigger waits %v ms, less than the migrate function's timeout of %v s", timeoutMs, fnTimeout)
		}
		deps := mustJSON(trig["DependsOn"])
		for what, id := range map[string]string{
			"cluster":  s.ref(t, s.stack.Database.Cluster.ClusterIdentifier()),
			"proxy":    s.ref(t, s.stack.Database.Proxy.DbProxyName()),
			"instance": s.idsOfType("AWS::RDS::DBInstance")[0],
			"targets":  s.idsOfType("AWS::RDS::DBProxyTargetGroup")[0],
		} {
			if !strings.Contains(deps, `"`+id+`"`) {
				t.Errorf("trigger does not depend on the %s (%s): DependsOn %s", what, id, deps)
			}
		}
	}
}

func TestOutputs(t *testing.T) {
	s := synth(t, variantAWS)
	outputs := s.json["Outputs"].(map[string]any)
	want := map[string]string{
		"ApiUrl":                s.ref(t, s.stack.API.RestApiId()),
		"QueueUrl":              s.ref(t, s.stack.Queues.Main.QueueUrl()),
		"DeadLetterQueueUrl":    s.ref(t, s.stack.Queues.DeadLetter.QueueUrl()),
		"DatabaseProxyEndpoint": s.ref(t, s.stack.Database.Proxy.DbProxyName()),
	}
	for name, ref := range want {
		o, ok := outputs[name].(map[string]any)
		if !ok {
			t.Errorf("output %s missing; have %v", name, keys(outputs))
			continue
		}
		if v := mustJSON(o["Value"]); !strings.Contains(v, `"`+ref+`"`) {
			t.Errorf("output %s = %s, want it to reference %s", name, v, ref)
		}
	}
	stageID := s.ref(t, s.stack.API.DeploymentStage().StageName())
	if props(s.resource(t, stageID))["StageName"] != APIStageName {
		t.Errorf("deployment stage %s is not %s", stageID, APIStageName)
	}
	if v := mustJSON(outputs["ApiUrl"].(map[string]any)["Value"]); !strings.Contains(v, `"https://"`) || !strings.Contains(v, `"`+stageID+`"`) {
		t.Errorf("ApiUrl %s, want https://<api>.execute-api.<region>.<suffix>/<stage>/", v)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestLocalStackVariant(t *testing.T) {
	s := synth(t, variantLocalStack)
	tpl := s.template
	for _, typ := range []string{"AWS::RDS::DBCluster", "AWS::RDS::DBInstance", "AWS::RDS::DBProxy", "AWS::EC2::VPC", "AWS::EC2::VPCEndpoint", "AWS::SecretsManager::Secret"} {
		check(t, "no "+typ, func() { tpl.ResourceCountIs(jsii.String(typ), jsii.Number(0)) })
	}
	check(t, "four functions outside any VPC", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Runtime":   "provided.al2023",
			"VpcConfig": assertions.Match_Absent(),
		}), jsii.Number(4))
	})
	check(t, "functions get DB_DSN and the endpoint URL, not the proxy settings", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Runtime":       "provided.al2023",
			"Architectures": []any{"x86_64"},
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(obj(map[string]any{
				"DB_DSN":           testDSN,
				"AWS_ENDPOINT_URL": testEndpointURL,
				"DB_HOST":          assertions.Match_Absent(),
				"DB_IAM_AUTH":      assertions.Match_Absent(),
			}))},
		}), jsii.Number(4))
	})
	check(t, "mapping without ScalingConfig, still reporting item failures", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
			"ScalingConfig":         assertions.Match_Absent(),
		}))
	})
	check(t, "queues, schedule, API, trigger and alarms are still there", func() {
		tpl.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(2))
		tpl.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(1))
		tpl.ResourceCountIs(jsii.String("AWS::ApiGateway::Method"), jsii.Number(4))
		tpl.ResourceCountIs(jsii.String("Custom::Trigger"), jsii.Number(1))
		tpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(4))
	})
	outputs := s.json["Outputs"].(map[string]any)
	if _, ok := outputs["DatabaseProxyEndpoint"]; ok {
		t.Errorf("LocalStack variant outputs a proxy endpoint")
	}
	api := s.policiesOfRole(t, s.ref(t, s.stack.Functions.API.Role().RoleName()))
	if !allows(api, "sqs:SendMessage", s.ref(t, s.stack.Queues.Main.QueueUrl())) {
		t.Errorf("LocalStack variant: api cannot send to the queue")
	}
}

func containsAll(haystack string, needles []string) bool {
	if len(needles) == 0 {
		return false
	}
	for _, n := range needles {
		if !strings.Contains(haystack, `"`+n+`"`) {
			return false
		}
	}
	return true
}
