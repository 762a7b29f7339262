package infra

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of api.go: the REST API, its routes, stage and invoke permissions, and the publicApi flag.

func TestAPI(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	apiID := s.ref(t, s.stack.API.RestApiId())
	apiFnID := s.ref(t, s.stack.Functions.API.FunctionName())

	check(t, "REST API (v1), not HTTP API", func() {
		tpl.ResourceCountIs(jsii.String("AWS::ApiGateway::RestApi"), jsii.Number(1))
		tpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Api"), jsii.Number(0))
	})
	check(t, "sixteen methods", func() { tpl.ResourceCountIs(jsii.String("AWS::ApiGateway::Method"), jsii.Number(16)) })
	check(t, "every method requires IAM (SigV4) and proxies to the api function", func() {
		tpl.AllResourcesProperties(jsii.String("AWS::ApiGateway::Method"), obj(map[string]any{
			"AuthorizationType": "AWS_IAM",
			"Integration": assertions.Match_ObjectLike(obj(map[string]any{
				"Type":                  "AWS_PROXY",
				"IntegrationHttpMethod": "POST",
				// arn:<partition>:apigateway:<region>:lambda:path/2015-03-31/functions/<api function ARN>/invocations
				"Uri": map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(arr(getAtt(apiFnID, "Arn")))}},
			})),
		}))
	})

	// The routes of the contract: each path found through the Resource tree from this API's root,
	// each method on its resource. With sixteen methods in all (above), they are the only ones.
	resource := func(parent any, pathPart string) string {
		t.Helper()
		var id string
		must(t, "one API resource "+pathPart, func() {
			id = *tpl.GetResourceId(jsii.String("AWS::ApiGateway::Resource"), obj(map[string]any{
				"Properties": assertions.Match_ObjectLike(obj(map[string]any{
					"RestApiId": refTo(apiID),
					"ParentId":  parent,
					"PathPart":  pathPart,
				})),
			}))
		})
		return id
	}
	root := getAtt(apiID, "RootResourceId")
	events := resource(root, "events")
	event := resource(refTo(events), "{id}")
	user := resource(refTo(resource(root, "counters")), "{userId}")
	reference := resource(refTo(resource(root, "references")), "{referenceId}")
	workers := resource(root, "workers")
	for _, r := range []struct{ method, path, resourceID string }{
		{"GET", "/events", events},
		{"POST", "/events", events},
		{"POST", "/events/async", resource(refTo(events), "async")},
		{"GET", "/events/{id}", event},
		{"GET", "/events/{id}/attempts", resource(refTo(event), "attempts")},
		{"POST", "/events/{id}/retry", resource(refTo(event), "retry")},
		{"GET", "/references/{referenceId}/events", resource(refTo(reference), "events")},
		{"POST", "/references/{referenceId}/retry", resource(refTo(reference), "retry")},
		{"GET", "/overview", resource(root, "overview")},
		{"GET", "/history", resource(root, "history")},
		{"GET", "/workers", workers},
		{"GET", "/workers/{workerId}", resource(refTo(workers), "{workerId}")},
		{"GET", "/agents", resource(root, "agents")},
		{"GET", "/counters/{userId}", user},
		{"GET", "/counters/{userId}/{entityType}", resource(refTo(user), "{entityType}")},
		{"GET", "/openapi.yaml", resource(root, "openapi.yaml")},
	} {
		check(t, "route "+r.method+" "+r.path, func() {
			tpl.HasResourceProperties(jsii.String("AWS::ApiGateway::Method"), obj(map[string]any{
				"RestApiId":  refTo(apiID),
				"ResourceId": refTo(r.resourceID),
				"HttpMethod": r.method,
			}))
		})
	}

	// Stage: throttling and JSON access logs into a log group with retention.
	stage := s.only(t, s.ref(t, s.stack.API.DeploymentStage().StageName()))
	logGroup := assertions.NewCapture(nil)
	must(t, "stage throttling and JSON access logs", func() {
		stage.HasResourceProperties(jsii.String("AWS::ApiGateway::Stage"), obj(map[string]any{
			"StageName": APIStageName,
			"MethodSettings": assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{
				"HttpMethod":           "*",
				"ResourcePath":         "/*",
				"ThrottlingRateLimit":  apiRateLimit,
				"ThrottlingBurstLimit": apiBurstLimit,
			})))),
			"AccessLogSetting": map[string]any{
				"DestinationArn": map[string]any{"Fn::GetAtt": []any{logGroup, "Arn"}},
				"Format": assertions.Match_SerializedJson(assertions.Match_ObjectLike(obj(map[string]any{
					"status":    assertions.Match_AnyValue(),
					"requestId": assertions.Match_AnyValue(),
				}))),
			},
		}))
	})
	check(t, "X-Ray tracing on the stage (docs/deploy.md, \"Tracing\")", func() {
		stage.HasResourceProperties(jsii.String("AWS::ApiGateway::Stage"), obj(map[string]any{"TracingEnabled": true}))
	})
	check(t, "access logs go to a log group with retention", func() {
		s.only(t, *logGroup.AsString()).HasResourceProperties(jsii.String("AWS::Logs::LogGroup"), obj(map[string]any{
			"RetentionInDays": logRetentionDays,
		}))
	})

	// The api function may be invoked by this API only, per method.
	check(t, "16 API Gateway invoke permissions, one per method, no test-invoke", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Permission"), obj(map[string]any{
			"Principal":    "apigateway.amazonaws.com",
			"FunctionName": getAtt(apiFnID, "Arn"),
		}), jsii.Number(16))
	})
}

func TestPublicAPIFlag(t *testing.T) {
	s := synth(t, variantPublic)
	check(t, "public variant: methods without authorisation", func() {
		s.template.AllResourcesProperties(jsii.String("AWS::ApiGateway::Method"), obj(map[string]any{"AuthorizationType": "NONE"}))
	})
	// The flag changes nothing else about the stack.
	aws := synth(t, variantAWS)
	for _, typ := range []string{"AWS::Lambda::Function", "AWS::RDS::DBProxy", "AWS::SQS::Queue", "AWS::CloudWatch::Alarm"} {
		if a, b := len(*s.template.FindResources(jsii.String(typ), nil)), len(*aws.template.FindResources(jsii.String(typ), nil)); a != b {
			t.Errorf("%s: %d in the public variant, %d in the default", typ, a, b)
		}
	}
}
