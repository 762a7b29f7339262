package infra

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Tests of stack.go: synthesis without lookups, the SQS endpoint's policy, the migrate trigger, the
// outputs, and the LocalStack variant. How the tests find resources: helpers_test.go.

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

// TestSQSEndpointPolicy: through the endpoint, the api may send to the main queue, and the processor
// and the counter function may extend the visibility of their messages on their own queue; nothing
// else. An extension makes two calls (internal/sqsbatch/visibility.go): GetQueueAttributes, once, to
// read the queue's own visibility timeout (an extension never sets less), then
// ChangeMessageVisibility; an endpoint policy that allows the second alone lets no extension happen
// on AWS, where the functions reach SQS through the endpoint (its private DNS name is the SQS one).
func TestSQSEndpointPolicy(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	mainArn := getAtt(s.ref(t, s.stack.Queues.Main.QueueUrl()), "Arn")
	countersArn := getAtt(s.ref(t, s.stack.Counters.Queue.QueueUrl()), "Arn")
	// Exactly one endpoint, so each check below is about that one.
	statements := assertions.NewCapture(nil)
	must(t, "endpoint policy", func() {
		s.only(t, s.ref(t, s.stack.Network.SqsEndpoint.VpcEndpointId())).HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
			"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{"Statement": statements})),
		}))
	})
	if n := len(*statements.AsArray()); n != 3 { // the counter's visibility extension: counters.go
		t.Errorf("SQS endpoint policy has %d statements, want 3: %s", n, mustJSON(statements.AsArray()))
	}
	extend := []any{"sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}
	for _, use := range []struct {
		fn     awslambda.Function
		action any
		queue  any
	}{
		{s.stack.Functions.API, "sqs:SendMessage", mainArn},
		{s.stack.Functions.Processor, extend, mainArn},
		{s.stack.Counters.Function, extend, countersArn},
	} {
		check(t, fmt.Sprintf("endpoint allows %v to %s's role only, on its queue only", use.action, *use.fn.Node().Id()), func() {
			tpl.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
				"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
					// Within arrayWith a plain object matches exactly: no other principal, action or resource.
					"Statement": assertions.Match_ArrayWith(arr(map[string]any{
						"Effect":    "Allow",
						"Action":    use.action,
						"Principal": map[string]any{"AWS": getAtt(s.ref(t, use.fn.Role().RoleName()), "Arn")},
						"Resource":  use.queue,
					})),
				})),
			}))
		})
	}
}

// TestMigrateTrigger: the schema is applied on deploy by the migrate function, once the database
// and the proxy exist, and a migrate error fails the deploy.
func TestMigrateTrigger(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	db := s.stack.Database
	migrateID := s.ref(t, s.stack.Functions.Migrate.FunctionName())
	clusterID := s.ref(t, db.Cluster.ClusterIdentifier())
	proxyID := s.ref(t, db.Proxy.DbProxyName())
	trigger := jsii.String("Custom::Trigger")

	// Exactly one trigger, so each check below is about that one.
	must(t, "one Custom::Trigger", func() { tpl.ResourceCountIs(trigger, jsii.Number(1)) })
	version := assertions.NewCapture(nil)
	timeoutMs := assertions.NewCapture(assertions.Match_StringLikeRegexp(jsii.String(`^\d+$`)))
	must(t, "trigger runs synchronously (a migrate error fails the deploy), again on every change of migrate", func() {
		tpl.HasResourceProperties(trigger, obj(map[string]any{
			"HandlerArn":             map[string]any{"Ref": version},
			"InvocationType":         "RequestResponse",
			"ExecuteOnHandlerChange": true,
			"Timeout":                timeoutMs,
		}))
	})
	check(t, "its handler is a version of the migrate function", func() {
		s.only(t, *version.AsString()).HasResourceProperties(jsii.String("AWS::Lambda::Version"), obj(map[string]any{
			"FunctionName": refTo(migrateID),
		}))
	})
	fnTimeout := assertions.NewCapture(nil)
	must(t, "migrate function timeout", func() {
		s.only(t, migrateID).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{"Timeout": fnTimeout}))
	})
	if ms, _ := strconv.ParseFloat(*timeoutMs.AsString(), 64); ms < *fnTimeout.AsNumber()*1000 {
		t.Errorf("trigger waits %v ms, less than the migrate function's timeout of %v s", ms, *fnTimeout.AsNumber())
	}

	var instanceID, targetsID string
	must(t, "the cluster's one instance and the proxy's one target group", func() {
		instanceID = *tpl.GetResourceId(jsii.String("AWS::RDS::DBInstance"), obj(map[string]any{
			"Properties": assertions.Match_ObjectLike(obj(map[string]any{"DBClusterIdentifier": refTo(clusterID)})),
		}))
		targetsID = *tpl.GetResourceId(jsii.String("AWS::RDS::DBProxyTargetGroup"), obj(map[string]any{
			"Properties": assertions.Match_ObjectLike(obj(map[string]any{"DBProxyName": refTo(proxyID)})),
		}))
	})
	proxyRolePolicyID := *tpl.GetResourceId(jsii.String("AWS::IAM::Policy"), obj(map[string]any{
		"Properties": assertions.Match_ObjectLike(obj(map[string]any{
			"Roles": assertions.Match_ArrayWith(arr(refTo(s.ref(t, db.ProxyRole.RoleName())))),
		})),
	}))
	for _, dep := range []struct{ what, id string }{
		{"cluster", clusterID}, {"proxy", proxyID}, {"instance", instanceID}, {"targets", targetsID},
		{"proxy's role policy (sign-in as the functions' users)", proxyRolePolicyID},
	} {
		check(t, "trigger depends on the "+dep.what, func() {
			tpl.HasResource(trigger, obj(map[string]any{"DependsOn": assertions.Match_ArrayWith(arr(dep.id))}))
		})
	}

	// The other functions wait for migrate: created (and on an update changed) once the schema and
	// their database users exist.
	triggerID := *tpl.GetResourceId(trigger, nil)
	for name, fn := range map[string]awslambda.Function{"api": s.stack.Functions.API, "processor": s.stack.Functions.Processor, "sweeper": s.stack.Functions.Sweeper} {
		check(t, name+" depends on the trigger", func() {
			s.only(t, s.ref(t, fn.FunctionName())).HasResource(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
				"DependsOn": assertions.Match_ArrayWith(arr(triggerID)),
			}))
		})
	}
}

// TestOutputs: the outputs docs/deploy.md lists (their names are the interface of the stack, read
// from cdk-outputs.json, so the test names them) hold what they say.
func TestOutputs(t *testing.T) {
	s := synth(t, variantAWS)
	apiID := s.ref(t, s.stack.API.RestApiId())
	stageID := s.ref(t, s.stack.API.DeploymentStage().StageName())
	check(t, "the API's deployment stage is "+APIStageName, func() {
		s.only(t, stageID).HasResourceProperties(jsii.String("AWS::ApiGateway::Stage"), obj(map[string]any{"StageName": APIStageName}))
	})
	for _, o := range []struct {
		name  string
		value any
	}{
		// https://<api>.execute-api.<region>.<suffix>/<stage>/
		{"ApiUrl", map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(arr("https://", refTo(apiID), refTo(stageID)))}}},
		{"QueueUrl", refTo(s.ref(t, s.stack.Queues.Main.QueueUrl()))},
		{"DeadLetterQueueUrl", refTo(s.ref(t, s.stack.Queues.DeadLetter.QueueUrl()))},
		{"DatabaseProxyEndpoint", getAtt(s.ref(t, s.stack.Database.Proxy.DbProxyName()), "Endpoint")},
		{"WebhookSecretArn", refTo(s.ref(t, s.stack.Webhooks.Secret.SecretArn()))},
		{"AlarmTopicArn", refTo(s.ref(t, s.stack.Notifications.Topic.TopicArn()))},
	} {
		check(t, "output "+o.name, func() {
			s.template.HasOutput(jsii.String(o.name), obj(map[string]any{"Value": o.value}))
		})
	}
}

func TestLocalStackVariant(t *testing.T) {
	s := synth(t, variantLocalStack)
	tpl := s.template
	for _, typ := range []string{"AWS::RDS::DBCluster", "AWS::RDS::DBInstance", "AWS::RDS::DBProxy", "AWS::EC2::VPC", "AWS::EC2::VPCEndpoint", "AWS::EC2::NatGateway"} {
		check(t, "no "+typ, func() { tpl.ResourceCountIs(jsii.String(typ), jsii.Number(0)) })
	}
	// The database's is not there; the webhook signing secret is (LocalStack implements Secrets Manager).
	check(t, "one secret, the webhook signing secret", func() {
		s.only(t, s.ref(t, s.stack.Webhooks.Secret.SecretArn())).ResourceCountIs(jsii.String("AWS::SecretsManager::Secret"), jsii.Number(1))
		tpl.ResourceCountIs(jsii.String("AWS::SecretsManager::Secret"), jsii.Number(1))
	})
	// Counts: each of the four functions (the only provided.al2023 ones) must match.
	check(t, "five functions outside any VPC", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Runtime":   "provided.al2023",
			"VpcConfig": assertions.Match_Absent(),
		}), jsii.Number(5))
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
		}), jsii.Number(5))
	})
	check(t, "processor's mapping without ScalingConfig, still reporting item failures", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"FunctionName":          refTo(s.ref(t, s.stack.Functions.Processor.FunctionName())),
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
			"ScalingConfig":         assertions.Match_Absent(),
		}))
	})
	check(t, "queues, schedule, API, trigger and alarms are still there", func() {
		tpl.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(2+2)) // and the counter's: counters.go
		tpl.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(defaultSweeperShards))
		tpl.ResourceCountIs(jsii.String("AWS::ApiGateway::Method"), jsii.Number(16))
		tpl.ResourceCountIs(jsii.String("Custom::Trigger"), jsii.Number(1))
		tpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(6+4+6)) // no database, no database alarms
	})
	if n := len(*tpl.FindOutputs(jsii.String("DatabaseProxyEndpoint"), nil)); n != 0 {
		t.Errorf("LocalStack variant outputs a proxy endpoint")
	}
	check(t, "api can send to the main queue", func() {
		tpl.HasResourceProperties(jsii.String("AWS::IAM::Policy"), grant(s.ref(t, s.stack.Functions.API.Role().RoleName()),
			assertions.Match_ArrayWith(arr("sqs:SendMessage")), getAtt(s.ref(t, s.stack.Queues.Main.QueueUrl()), "Arn")))
	})
}
