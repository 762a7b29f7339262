package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/triggers"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// ExactlyOnceStackProps configures NewExactlyOnceStack.
type ExactlyOnceStackProps struct {
	awscdk.StackProps
	Config Config
}

// ExactlyOnceStack is the whole application: API, queue, functions, schedule, database.
type ExactlyOnceStack struct {
	awscdk.Stack
	Network   *Network  // nil in the LocalStack variant
	Database  *Database // nil in the LocalStack variant
	Queues    *Queues
	Functions *Functions
	API       awsapigateway.RestApi
	Counters  *CounterService // counters.go
	Webhooks  *Webhooks       // webhooks.go
	History   *History        // history.go: the archive of the packed history

	Alarms        *Alarms        // alarms.go
	SignalAlarms  *SignalAlarms  // alarms_signals.go
	Notifications *Notifications // notify.go: the topic every alarm reports to
	Dashboard     awscloudwatch.Dashboard
}

// NewExactlyOnceStack builds the stack. It needs no AWS account, region or context lookups:
// the stack is environment-agnostic and the VPC uses two AZs chosen by Fn::GetAZs at deploy time.
func NewExactlyOnceStack(scope constructs.Construct, id string, props *ExactlyOnceStackProps) *ExactlyOnceStack {
	var sprops awscdk.StackProps
	var cfg Config
	if props != nil {
		sprops, cfg = props.StackProps, props.Config
	}
	if sprops.Description == nil {
		sprops.Description = jsii.String("Exactly-once event processing: API Gateway, SQS, Lambda, Aurora MySQL Serverless v2 behind RDS Proxy")
	}
	stack := awscdk.NewStack(scope, &id, &sprops)
	s := &ExactlyOnceStack{Stack: stack}

	s.Queues = NewQueues(stack, "Queues")

	var dbAccess DatabaseAccess
	if cfg.LocalStack {
		// LocalStack's free plan has no RDS: the functions talk to the MySQL the user runs.
		dbAccess = DatabaseAccess{DSN: cfg.DBDSN, AWSEndpointURL: cfg.AWSEndpointURL}
	} else {
		s.Network = NewNetwork(stack, "Network", cfg.NatGateways)
		s.Database = NewDatabase(stack, "Database", s.Network)
		dbAccess = DatabaseAccess{Network: s.Network, Database: s.Database}
	}

	s.Functions = NewFunctions(stack, FunctionsProps{
		AssetDir:      cfg.AssetDir,
		Architecture:  lambdaArchitecture(cfg.LambdaArch),
		Access:        dbAccess,
		Queue:         s.Queues.Main,
		SweeperShards: cfg.SweeperShards,
	})

	if s.Network != nil {
		// Defence in depth: through the endpoint, the api can only send to the main queue and the
		// processor only extend the visibility of its messages (receive and delete are done by the
		// Lambda service's poller, outside the VPC).
		for _, use := range []struct {
			fn     awslambda.Function
			action string
		}{{s.Functions.API, "sqs:SendMessage"}, {s.Functions.Processor, "sqs:ChangeMessageVisibility"}} {
			s.Network.SqsEndpoint.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Principals: &[]awsiam.IPrincipal{awsiam.NewArnPrincipal(use.fn.Role().RoleArn())},
				Actions:    jsii.Strings(use.action),
				Resources:  jsii.Strings(*s.Queues.Main.QueueArn()),
			}))
		}
	}

	// Schema on deploy: run migrate once the database and the proxy exist, and again whenever the
	// migrate function changes. An error from migrate fails the deployment.
	trigger := triggers.NewTrigger(stack, jsii.String("MigrateOnDeploy"), &triggers.TriggerProps{
		Handler:                s.Functions.Migrate,
		Timeout:                awscdk.Duration_Seconds(jsii.Number(triggerTimeout.Seconds())),
		InvocationType:         triggers.InvocationType_REQUEST_RESPONSE,
		ExecuteOnHandlerChange: jsii.Bool(true),
	})
	if s.Database != nil {
		// ProxyRole too: its policy lets the proxy sign in as the functions' users, which run after.
		trigger.ExecuteAfter(s.Database.Cluster, s.Database.Proxy, s.Database.ProxyRole)
	}
	// The other functions are created, and on an update changed, only after migrate has run: the
	// schema their code expects and the database users they connect as exist before they do. The
	// function resources alone: their security groups must exist before the proxy admits them.
	for _, fn := range []awslambda.Function{s.Functions.API, s.Functions.Processor, s.Functions.Sweeper} {
		fn.Node().DefaultChild().Node().AddDependency(trigger)
	}

	// Task delivery: the signing secret and, in AWS, the way out through the NAT gateway.
	s.Webhooks = NewWebhooks(stack, "Webhooks", WebhooksProps{
		Delivering: []awslambda.Function{s.Functions.Processor, s.Functions.Sweeper},
		Network:    s.Network,
	})

	s.History = NewHistory(stack, "History", HistoryProps{Network: s.Network, Writer: s.Functions.Sweeper,
		Readers: []awslambda.Function{s.Functions.API}, Retention: cfg.HistoryRetention})

	wireProcessor(s.Functions.Processor, s.Queues.Main, !cfg.LocalStack)
	s.Counters = NewCounterService(stack, "Counters", CounterServiceProps{Functions: FunctionsProps{AssetDir: cfg.AssetDir,
		Architecture: lambdaArchitecture(cfg.LambdaArch), Access: dbAccess}, Sweeper: s.Functions.Sweeper, Trigger: trigger, CapConcurrency: !cfg.LocalStack})
	NewSweepSchedule(stack, "SweepSchedule", s.Functions.Sweeper, max(cfg.SweeperShards, 1))
	s.API = NewEventsAPI(stack, "Api", s.Functions.API, cfg.PublicAPI)
	s.Alarms = NewAlarms(stack, "Alarms", AlarmsProps{
		Queues:    s.Queues,
		Processor: s.Functions.Processor,
		Sweeper:   s.Functions.Sweeper,
		API:       s.API,
	})
	s.SignalAlarms = NewSignalAlarms(stack, "SignalAlarms", SignalAlarmsProps{
		API: s.API, Functions: s.Functions, Counter: s.Counters.Function, CounterQueue: s.Counters.Queue, Database: s.Database,
	})
	// Every alarm of the stack reports to the operator's topic, and shows on the dashboard.
	alarms := append(s.Alarms.All(), s.Counters.DeadLetters, s.Counters.Errors, s.Counters.Mismatches)
	alarms = append(alarms, s.SignalAlarms.All()...)
	s.Notifications = NewNotifications(stack, "Notifications", cfg.AlarmEmail)
	s.Notifications.Notify(alarms...)
	s.Dashboard = NewDashboard(stack, "Dashboard", DashboardProps{
		API: s.API, Functions: s.Functions, Counter: s.Counters.Function, Database: s.Database, Alarms: alarms,
		Queues: []NamedQueue{{"events", s.Queues.Main}, {"events-dlq", s.Queues.DeadLetter},
			{"counters", s.Counters.Queue}, {"counters-dlq", s.Counters.DeadLetter}},
	})

	awscdk.NewCfnOutput(stack, jsii.String("ApiUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Base URL of the events API (append events, events/async, events/{id})"),
		Value:       s.API.Url(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("QueueUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Main SQS queue the api sends to and the processor consumes"),
		Value:       s.Queues.Main.QueueUrl(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("DeadLetterQueueUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Dead-letter queue (redrive with StartMessageMoveTask)"),
		Value:       s.Queues.DeadLetter.QueueUrl(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("WebhookSecretArn"), &awscdk.CfnOutputProps{
		Description: jsii.String("Secrets Manager secret the webhooks are signed with: receivers verify with whsec_<its value>"),
		Value:       s.Webhooks.Secret.SecretArn(),
	})
	if s.Database != nil {
		awscdk.NewCfnOutput(stack, jsii.String("DeliverySourceIps"), &awscdk.CfnOutputProps{
			Description: jsii.String("Public IPv4 addresses every webhook delivery comes from (the NAT gateways'), comma-separated"),
			Value:       awscdk.Fn_Join(jsii.String(","), &s.Network.NatAddresses),
		})
		awscdk.NewCfnOutput(stack, jsii.String("DatabaseProxyEndpoint"), &awscdk.CfnOutputProps{
			Description: jsii.String("RDS Proxy endpoint the functions connect to (IAM auth, TLS)"),
			Value:       s.Database.Proxy.Endpoint(),
		})
		awscdk.NewCfnOutput(stack, jsii.String("DatabaseSecretArn"), &awscdk.CfnOutputProps{
			Description: jsii.String("Secrets Manager secret with the generated admin credentials (used by the proxy)"),
			Value:       s.Database.Cluster.Secret().SecretArn(),
		})
	}

	addNagSuppressions(s, cfg)
	return s
}

func lambdaArchitecture(name string) awslambda.Architecture {
	if name == "x86_64" {
		return awslambda.Architecture_X86_64()
	}
	return awslambda.Architecture_ARM_64()
}
