package infra

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// FunctionNames are the function folders of docs/contract.md: functions/<name>, built to
// <assetDir>/<name>/bootstrap.
var FunctionNames = []string{"api", "processor", "sweeper", "migrate", "counter"}

// DatabaseAccess says how the functions reach the database: through the proxy inside the VPC
// (Network and Database set), or with a DSN (LocalStack variant).
type DatabaseAccess struct {
	Network  *Network
	Database *Database

	DSN            string
	AWSEndpointURL string
}

// FunctionsProps configures NewFunctions.
type FunctionsProps struct {
	AssetDir     string
	Architecture awslambda.Architecture
	Access       DatabaseAccess
	Queue        awssqs.IQueue // the api sends to it
	// SweeperShards is the sweeper's SWEEPER_SHARDS: the static shards its invocations run.
	SweeperShards int
}

// Functions are four of the application's Lambda functions (the fifth, the counter service's, is
// counters.go's). They sit directly in the ExactlyOnce construct as ApiFunction, ProcessorFunction,
// SweeperFunction and MigrateFunction: the names `sam local invoke` takes (SAM uses the construct's
// id, from the aws:cdk:path metadata; sam_test.go checks the docs against it).
type Functions struct {
	API       awslambda.Function
	Processor awslambda.Function
	Sweeper   awslambda.Function
	Migrate   awslambda.Function
}

type functionSpec struct {
	name         string
	description  string
	timeout      time.Duration
	maxOpenConns int
	// dbUser is the database user the function connects as: its own, or the admin for migrate.
	dbUser string
	// migrateOnStart leaves DB_MIGRATE at its default (true); the others skip it because the
	// migrate trigger has applied the schema before they can run.
	migrateOnStart bool
	// delivers marks the functions that POST webhooks (processor, sweeper): they run in the delivery
	// subnets, the only ones with a route out of the VPC (webhooks.go opens their egress).
	delivers bool
	// traced turns on X-Ray active tracing: the functions a request or a message invokes (api,
	// processor, counter), so that at idle nothing is traced (docs/deploy.md, "Tracing").
	traced bool
}

// NewFunctions creates the functions, each with its own role, log group and (in AWS) security group.
func NewFunctions(scope constructs.Construct, props FunctionsProps) *Functions {
	f := &Functions{}
	f.API = newFunction(scope, props, functionSpec{
		name: "api", description: "Events REST API (API Gateway proxy integration)",
		timeout: apiTimeout, maxOpenConns: apiMaxOpenConns, dbUser: databaseAPIUser, traced: true,
	})
	f.Processor = newFunction(scope, props, functionSpec{
		name: "processor", description: "Processes events from the SQS queue, reporting per-message failures",
		timeout: processorTimeout, maxOpenConns: processorMaxOpenConns, dbUser: databaseProcessorUser, delivers: true, traced: true,
	})
	f.Sweeper = newFunction(scope, props, functionSpec{
		name: "sweeper", description: "Scheduled sweep of pending events the queue path missed",
		timeout: sweeperTimeout, maxOpenConns: sweeperMaxOpenConns, dbUser: databaseSweeperUser, delivers: true,
	})
	f.Migrate = newFunction(scope, props, functionSpec{
		name: "migrate", description: "Applies and verifies the schema; invoked by a CDK Trigger on deploy",
		timeout: migrateTimeout, maxOpenConns: migrateMaxOpenConns, migrateOnStart: true, dbUser: databaseAdminUsername,
	})
	if props.Access.Network != nil {
		// Migrate creates each function's database user, by role (internal/mysql, users.sql).
		f.Migrate.AddEnvironment(jsii.String("DB_FUNCTION_USERS"), jsii.String(strings.Join([]string{
			"api:" + databaseAPIUser, "processor:" + databaseProcessorUser, "sweeper:" + databaseSweeperUser,
			"counter:" + databaseCounterUser, // counters.go
		}, ",")), nil)
	}

	// The api alone sends to SQS, and only to this queue.
	props.Queue.GrantSendMessages(f.API)
	f.API.AddEnvironment(jsii.String("QUEUE_URL"), props.Queue.QueueUrl(), nil)
	if n := props.Access.Network; n != nil {
		f.API.Connections().AllowTo(n.SqsEndpoint, awsec2.Port_Tcp(jsii.Number(443)), jsii.String("api to the SQS endpoint"))
		// The processor extends the visibility of slow batches (sqs:ChangeMessageVisibility, granted
		// with the mapping's consume permissions); it finds the queue URL from the records' ARN.
		f.Processor.Connections().AllowTo(n.SqsEndpoint, awsec2.Port_Tcp(jsii.Number(443)), jsii.String("processor to the SQS endpoint"))
	}

	// Each invocation is an agent on the shard its rule names, of SWEEPER_SHARDS (schedule.go).
	f.Sweeper.AddEnvironment(jsii.String("SWEEPER_SHARDS"), jsii.String(fmt.Sprint(max(props.SweeperShards, 1))), nil)

	// The sweeper runs again next minute: a failed or stale tick is not worth a retry.
	f.Sweeper.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(0),
		MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(sweepRate.Seconds())),
	})
	return f
}

// constructID is the construct ID of a function: api -> ApiFunction.
func constructID(name string) string {
	return strings.ToUpper(name[:1]) + name[1:] + "Function"
}

func newFunction(scope constructs.Construct, props FunctionsProps, spec functionSpec) awslambda.Function {
	id := constructID(spec.name)
	logs := awslogs.NewLogGroup(scope, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		Retention:     logRetention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})

	// A role of its own, without AWSLambdaBasicExecutionRole: writing to its own log group is all the
	// logging it needs (the log group exists, so no logs:CreateLogGroup).
	role := awsiam.NewRole(scope, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String(fmt.Sprintf("exactlyonce %s function", spec.name)),
	})
	logs.GrantWrite(role)

	env := map[string]*string{
		"DB_MAX_OPEN_CONNS": jsii.String(fmt.Sprint(spec.maxOpenConns)),
		"LOG_LEVEL":         jsii.String("info"),
	}
	if !spec.migrateOnStart {
		env["DB_MIGRATE"] = jsii.String("false")
	}

	fnProps := &awslambda.FunctionProps{
		Description:   jsii.String(spec.description),
		Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:  props.Architecture,
		Handler:       jsii.String("bootstrap"),
		Code:          awslambda.Code_FromAsset(jsii.String(filepath.Join(props.AssetDir, spec.name)), nil),
		Timeout:       awscdk.Duration_Seconds(jsii.Number(spec.timeout.Seconds())),
		MemorySize:    jsii.Number(functionMemoryMB),
		Role:          role,
		LogGroup:      logs,
		LoggingFormat: awslambda.LoggingFormat_JSON,
		Environment:   &env,
	}
	if spec.traced {
		// CDK adds xray:PutTraceSegments and xray:PutTelemetryRecords to the role (on "*": X-Ray
		// has no resource-level permissions for them; nag.go).
		fnProps.Tracing = awslambda.Tracing_ACTIVE
	}

	access := props.Access
	if access.Network != nil {
		db := access.Database
		env["DB_HOST"] = db.Proxy.Endpoint()
		env["DB_PORT"] = jsii.String(fmt.Sprint(databasePort))
		env["DB_NAME"] = jsii.String(databaseName)
		env["DB_USER"] = jsii.String(spec.dbUser)
		env["DB_IAM_AUTH"] = jsii.String("true")

		fnProps.Vpc = access.Network.Vpc
		fnProps.VpcSubnets = access.Network.FunctionSubnets()
		if spec.delivers {
			fnProps.VpcSubnets = access.Network.DeliverySubnets()
		}
		// Egress is opened rule by rule below (proxy; the api also the SQS endpoint; the delivering
		// functions 443 and 80 anywhere: webhooks.go).
		fnProps.AllowAllOutbound = jsii.Bool(false)
		// What the Lambda service needs to attach the function to the VPC. These EC2 actions do not
		// support resource-level permissions, hence "*" (the same statement as the AWS managed policy
		// AWSLambdaVPCAccessExecutionRole, without its logs:* on every log group).
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions: jsii.Strings(
				"ec2:CreateNetworkInterface",
				"ec2:DescribeNetworkInterfaces",
				"ec2:DescribeSubnets",
				"ec2:DeleteNetworkInterface",
				"ec2:AssignPrivateIpAddresses",
				"ec2:UnassignPrivateIpAddresses",
			),
			Resources: jsii.Strings("*"),
		}))
	} else {
		env["DB_DSN"] = jsii.String(access.DSN)
		env["AWS_ENDPOINT_URL"] = jsii.String(access.AWSEndpointURL)
	}

	fn := awslambda.NewFunction(scope, jsii.String(id), fnProps)

	if access.Network != nil {
		db := access.Database
		fn.Connections().AllowTo(db.Proxy, awsec2.Port_Tcp(jsii.Number(databasePort)), jsii.String(spec.name+" to RDS Proxy"))
		// rds-db:connect on this proxy as its own database user only; no access to the secret.
		if spec.dbUser == databaseAdminUsername {
			db.Proxy.GrantConnect(fn, jsii.String(spec.dbUser)) // the proxy signs in with the admin secret
		} else {
			db.AllowIAMUser(fn, spec.dbUser) // end-to-end IAM: the proxy's role signs in as the user too
		}
	}
	return fn
}

// wireProcessor subscribes the processor to the queue. The mapping grants the processor
// sqs:ReceiveMessage/DeleteMessage/ChangeMessageVisibility/GetQueueAttributes on this queue only.
// LocalStack does not implement ScalingConfig, so the cap is left out there.
func wireProcessor(processor awslambda.Function, queue awssqs.IQueue, capConcurrency bool) {
	props := &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(batchSize),
		MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(maxBatchingWindow.Seconds())),
		ReportBatchItemFailures: jsii.Bool(true),
	}
	if capConcurrency {
		props.MaxConcurrency = jsii.Number(processorConcurrency)
	}
	processor.AddEventSource(awslambdaeventsources.NewSqsEventSource(queue, props))
}
