package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// APIStageName is the stage of the REST API; the URL is https://<id>.execute-api.<region>.amazonaws.com/v1/.
const APIStageName = "v1"

// NewEventsAPI creates the REST API (v1) with Lambda proxy integrations for the routes of
// docs/contract.md, which are those of the API's OpenAPI document (../openapi.yaml; openapi_test.go). Every method requires SigV4-signed requests (AuthorizationType AWS_IAM) unless
// public is true.
func NewEventsAPI(scope constructs.Construct, id string, handler awslambda.IFunction, public bool) awsapigateway.RestApi {
	accessLogs := awslogs.NewLogGroup(scope, jsii.String(id+"AccessLogs"), &awslogs.LogGroupProps{
		Retention:     logRetention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})

	auth := awsapigateway.AuthorizationType_IAM
	if public {
		auth = awsapigateway.AuthorizationType_NONE
	}

	api := awsapigateway.NewRestApi(scope, &id, &awsapigateway.RestApiProps{
		Description:   jsii.String("exactlyonce events API"),
		EndpointTypes: &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		// The account-wide API Gateway CloudWatch role is not this stack's to own (see docs/deploy.md).
		CloudWatchRole: jsii.Bool(false),
		DeployOptions: &awsapigateway.StageOptions{
			StageName:            jsii.String(APIStageName),
			ThrottlingRateLimit:  jsii.Number(apiRateLimit),
			ThrottlingBurstLimit: jsii.Number(apiBurstLimit),
			MetricsEnabled:       jsii.Bool(true),
			// X-Ray: the stage samples with the account's sampling rules (the default: the first
			// request each second and 5 % of the rest); no request, no trace (docs/deploy.md, "Tracing").
			TracingEnabled:       jsii.Bool(true),
			AccessLogDestination: awsapigateway.NewLogGroupLogDestination(accessLogs),
			AccessLogFormat: awsapigateway.AccessLogFormat_JsonWithStandardFields(&awsapigateway.JsonWithStandardFieldProps{
				Caller: jsii.Bool(true), HttpMethod: jsii.Bool(true), Ip: jsii.Bool(true),
				Protocol: jsii.Bool(true), RequestTime: jsii.Bool(true), ResourcePath: jsii.Bool(true),
				ResponseLength: jsii.Bool(true), Status: jsii.Bool(true), User: jsii.Bool(true),
			}),
		},
		DefaultIntegration: awsapigateway.NewLambdaIntegration(handler, &awsapigateway.LambdaIntegrationOptions{
			Proxy:           jsii.Bool(true),
			AllowTestInvoke: jsii.Bool(false),
		}),
		DefaultMethodOptions: &awsapigateway.MethodOptions{AuthorizationType: auth},
	})

	validator := api.AddRequestValidator(jsii.String("RequestValidator"), &awsapigateway.RequestValidatorOptions{
		ValidateRequestParameters: jsii.Bool(true),
		ValidateRequestBody:       jsii.Bool(false), // the api validates bodies and answers with its own errors
	})
	withValidator := &awsapigateway.MethodOptions{AuthorizationType: auth, RequestValidator: validator}

	events := api.Root().AddResource(jsii.String("events"), nil)
	events.AddMethod(jsii.String("GET"), nil, withValidator)
	events.AddMethod(jsii.String("POST"), nil, withValidator)
	events.AddResource(jsii.String("async"), nil).AddMethod(jsii.String("POST"), nil, withValidator)
	withPath := func(params ...string) *awsapigateway.MethodOptions {
		required := map[string]*bool{}
		for _, p := range params {
			required["method.request.path."+p] = jsii.Bool(true)
		}
		return &awsapigateway.MethodOptions{AuthorizationType: auth, RequestValidator: validator, RequestParameters: &required}
	}
	event := events.AddResource(jsii.String("{id}"), nil)
	event.AddMethod(jsii.String("GET"), nil, withPath("id"))
	// Tasks: a task's attempts, its manual retry, and a reference's tasks in delivery order.
	event.AddResource(jsii.String("attempts"), nil).AddMethod(jsii.String("GET"), nil, withPath("id"))
	event.AddResource(jsii.String("retry"), nil).AddMethod(jsii.String("POST"), nil, withPath("id"))
	reference := api.Root().AddResource(jsii.String("references"), nil).AddResource(jsii.String("{referenceId}"), nil)
	reference.AddResource(jsii.String("events"), nil).AddMethod(jsii.String("GET"), nil, withPath("referenceId"))
	// The operators' console reads only the API, signed with the operator's credentials:
	// the overview, the event workers' registry, and the bulk retry of a reference's failed tasks.
	// (GET /events?state= lists events on the GET /events method above: its query parameters are
	// the API's to check.)
	reference.AddResource(jsii.String("retry"), nil).AddMethod(jsii.String("POST"), nil, withPath("referenceId"))
	api.Root().AddResource(jsii.String("overview"), nil).AddMethod(jsii.String("GET"), nil, withValidator)
	// The history by tier: events, pages, archive.
	api.Root().AddResource(jsii.String("history"), nil).AddMethod(jsii.String("GET"), nil, withValidator)
	workers := api.Root().AddResource(jsii.String("workers"), nil)
	workers.AddMethod(jsii.String("GET"), nil, withValidator)
	workers.AddResource(jsii.String("{workerId}"), nil).AddMethod(jsii.String("GET"), nil, withPath("workerId"))
	// The agents and the counter service's counts.
	api.Root().AddResource(jsii.String("agents"), nil).AddMethod(jsii.String("GET"), nil, withValidator)
	user := api.Root().AddResource(jsii.String("counters"), nil).AddResource(jsii.String("{userId}"), nil)
	user.AddMethod(jsii.String("GET"), nil, withPath("userId"))
	user.AddResource(jsii.String("{entityType}"), nil).AddMethod(jsii.String("GET"), nil, withPath("userId", "entityType"))
	// The API's OpenAPI document (openapi.yaml), which lists these routes (openapi_test.go).
	api.Root().AddResource(jsii.String("openapi.yaml"), nil).AddMethod(jsii.String("GET"), nil, withValidator)
	return api
}
