package infra

import (
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/triggers"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// VisibilityExtensionActions are the SQS calls a consumer's visibility extension makes through the
// SQS endpoint (internal/sqsbatch/visibility.go): GetQueueAttributes, once, to read the queue's own
// visibility timeout, then ChangeMessageVisibility at every heartbeat. The endpoint's policy allows
// the processor and the counter function these on their own queue (the mapping's poller receives
// and deletes outside the VPC).
var VisibilityExtensionActions = []string{"sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}

// ExactlyOnceProps configures NewExactlyOnce: what a CDK app that uses the construct decides. A zero
// field is the default the app in infra/app deploys (tuning.go).
type ExactlyOnceProps struct {
	// AssetDir holds the functions' bootstraps, <AssetDir>/<function>/bootstrap (`make lambdas`
	// builds build/lambda). Required.
	AssetDir string
	// LambdaArch is the bootstraps' architecture: "arm64" (default) or "x86_64".
	LambdaArch string

	// Vpc is an existing VPC to run in, with Subnets saying where each part goes; nil: a VPC of the
	// construct's own (network.go), with NatGateways NAT gateways (default 1).
	Vpc         awsec2.IVpc
	Subnets     NetworkSubnets
	NatGateways int
	// Database is the Aurora cluster's capacity, backups and deletion protection.
	Database DatabaseSettings
	// External, when set, replaces the VPC, Aurora and RDS Proxy with a MySQL the functions reach
	// by DSN (the LocalStack variant, whose free plan has no RDS).
	External *ExternalDatabase

	// WebhookSecret is the tasks' signing secret; nil: one is generated (webhooks.go).
	WebhookSecret awssecretsmanager.ISecret
	// AlarmTopic is where every alarm reports; nil: a topic of the construct's own (notify.go).
	// AlarmEmail, when set, is subscribed to it.
	AlarmTopic awssns.ITopic
	AlarmEmail string

	// PublicAPI drops the API's IAM (SigV4) authorisation (for sam local start-api and LocalStack).
	PublicAPI bool
	// SweeperShards is how many static shards the scheduled sweeper runs (default 2, at most 8).
	SweeperShards int
	// Retention holds how long kept data lives.
	Retention RetentionSettings
}

// ExternalDatabase is a MySQL outside the construct.
type ExternalDatabase struct {
	// DSN is the functions' DB_DSN; AWSEndpointURL their AWS_ENDPOINT_URL (LocalStack's).
	DSN, AWSEndpointURL string
}

// RetentionSettings are how long the construct keeps data. The queues', the logs' and the
// backups' retentions are tuning.go's and DatabaseSettings'. The archived history has no expiry:
// every event stays readable by id, and GET /events counts it (history.go).
type RetentionSettings struct {
	// Window is the sweeper's HISTORY_RETENTION: how long after its newest event a packed page stays
	// in the database before the sweeper archives it to the history bucket (history.go); nil: the
	// application's default, 2h; zero: as soon as it is packed.
	Window *time.Duration
}

func (p ExactlyOnceProps) withDefaults() ExactlyOnceProps {
	if p.LambdaArch == "" {
		p.LambdaArch = "arm64"
	}
	if p.NatGateways == 0 {
		p.NatGateways = defaultNatGateways
	}
	if p.SweeperShards == 0 {
		p.SweeperShards = defaultSweeperShards
	}
	return p
}

// Validate names what is wrong with p.
func (p ExactlyOnceProps) Validate() error {
	p = p.withDefaults()
	switch {
	case p.AssetDir == "":
		return fmt.Errorf("ExactlyOnceProps.AssetDir is required (make lambdas builds build/lambda)")
	case p.LambdaArch != "arm64" && p.LambdaArch != "x86_64":
		return fmt.Errorf("ExactlyOnceProps.LambdaArch %q: want arm64 or x86_64", p.LambdaArch)
	case p.SweeperShards < 1 || p.SweeperShards > maxSweeperShards:
		return fmt.Errorf("ExactlyOnceProps.SweeperShards %d: want 1 to %d", p.SweeperShards, maxSweeperShards)
	case p.External != nil && p.Vpc != nil:
		return fmt.Errorf("ExactlyOnceProps: an External database runs with no VPC; give Vpc or External, not both")
	case p.External != nil && p.External.DSN == "":
		return fmt.Errorf("ExactlyOnceProps.External.DSN is required")
	case p.Vpc != nil && (p.Subnets.Functions == nil || p.Subnets.Database == nil || p.Subnets.Delivery == nil):
		return fmt.Errorf("ExactlyOnceProps.Subnets: with a Vpc, select the Functions, Database and Delivery subnets")
	case p.Vpc == nil && p.External == nil && (p.NatGateways < 1 || p.NatGateways > vpcMaxAzs):
		return fmt.Errorf("ExactlyOnceProps.NatGateways %d: want 1 to %d (one per AZ); webhook delivery needs a way out", p.NatGateways, vpcMaxAzs)
	case p.Retention.Window != nil && *p.Retention.Window < 0:
		return fmt.Errorf("ExactlyOnceProps.Retention.Window %s: want 0 or more (0 archives pages as soon as they are packed)", *p.Retention.Window)
	case p.AlarmEmail != "" && !validEmail(p.AlarmEmail):
		return fmt.Errorf("ExactlyOnceProps.AlarmEmail %q: want one email address", p.AlarmEmail)
	}
	return nil
}

// ExactlyOnce is the whole application as one construct, for a CDK app of one's own: the API, the
// queues, the functions, the schedule, the database (or an external one), the counter service, task
// delivery, alarms and the dashboard. One per stack: the names it gives (queues, topics, the proxy)
// derive from the stack's. The app in infra/app is its first user (NewExactlyOnceStack); README.md,
// "Deploying to AWS", shows it in another app.
type ExactlyOnce struct {
	constructs.Construct
	Network   *Network  // nil with an External database
	Database  *Database // nil with an External database
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

// NewExactlyOnce builds the application under scope. It needs no AWS account, region or context
// lookups. It panics on props that Validate refuses, as CDK constructs do.
func NewExactlyOnce(scope constructs.Construct, id string, props ExactlyOnceProps) *ExactlyOnce {
	if err := props.Validate(); err != nil {
		panic(err)
	}
	p := props.withDefaults()
	c := constructs.NewConstruct(scope, &id)
	s := &ExactlyOnce{Construct: c}

	s.Queues = NewQueues(c, "Queues")

	var dbAccess DatabaseAccess
	switch {
	case p.External != nil:
		// LocalStack's free plan has no RDS: the functions talk to the MySQL the user runs.
		dbAccess = DatabaseAccess{DSN: p.External.DSN, AWSEndpointURL: p.External.AWSEndpointURL}
	case p.Vpc != nil:
		s.Network = NewNetworkIn(c, "Network", p.Vpc, p.Subnets)
	default:
		s.Network = NewNetwork(c, "Network", p.NatGateways)
	}
	if s.Network != nil {
		s.Database = NewDatabase(c, "Database", s.Network, p.Database)
		dbAccess = DatabaseAccess{Network: s.Network, Database: s.Database}
	}

	s.Functions = NewFunctions(c, FunctionsProps{
		AssetDir:      p.AssetDir,
		Architecture:  lambdaArchitecture(p.LambdaArch),
		Access:        dbAccess,
		Queue:         s.Queues.Main,
		SweeperShards: p.SweeperShards,
	})

	if s.Network != nil {
		// Defence in depth: through the endpoint, the api can only send to the main queue and the
		// processor only extend the visibility of its messages (receive and delete are done by the
		// Lambda service's poller, outside the VPC). An extension reads the queue's own visibility
		// timeout once first (internal/sqsbatch/visibility.go), so that it never sets less.
		for _, use := range []struct {
			fn      awslambda.Function
			actions []string
		}{{s.Functions.API, []string{"sqs:SendMessage"}}, {s.Functions.Processor, VisibilityExtensionActions}} {
			s.Network.SqsEndpoint.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Principals: &[]awsiam.IPrincipal{awsiam.NewArnPrincipal(use.fn.Role().RoleArn())},
				Actions:    jsii.Strings(use.actions...),
				Resources:  jsii.Strings(*s.Queues.Main.QueueArn()),
			}))
		}
	}

	// Schema on deploy: run migrate once the database and the proxy exist, and again whenever the
	// migrate function changes. An error from migrate fails the deployment.
	trigger := triggers.NewTrigger(c, jsii.String("MigrateOnDeploy"), &triggers.TriggerProps{
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
	s.Webhooks = NewWebhooks(c, "Webhooks", WebhooksProps{
		Delivering: []awslambda.Function{s.Functions.Processor, s.Functions.Sweeper},
		Network:    s.Network,
		Secret:     p.WebhookSecret,
	})

	// The archive of the packed history: the sweeper writes, the api reads.
	s.History = NewHistory(c, "History", HistoryProps{Network: s.Network, Writer: s.Functions.Sweeper,
		Readers: []awslambda.Function{s.Functions.API}, Retention: p.Retention.Window})

	wireProcessor(s.Functions.Processor, s.Queues.Main, p.External == nil)
	s.Counters = NewCounterService(c, "Counters", CounterServiceProps{Functions: FunctionsProps{AssetDir: p.AssetDir,
		Architecture: lambdaArchitecture(p.LambdaArch), Access: dbAccess}, Sweeper: s.Functions.Sweeper, Trigger: trigger, CapConcurrency: p.External == nil})
	NewSweepSchedule(c, "SweepSchedule", s.Functions.Sweeper, max(p.SweeperShards, 1))
	s.API = NewEventsAPI(c, "Api", s.Functions.API, p.PublicAPI)
	// The API's own domain is no task's host (WEBHOOK_API_HOSTS): the api function refuses such a
	// url at create, the processor and the sweeper refuse to deliver there. With PublicAPI, a task
	// whose url is the API's POST /events/async made a task per delivery, without end. The RestApi
	// by id only: its URL names the stage, which waits for the methods, which wait for the function.
	stack := awscdk.Stack_Of(c)
	apiDomain := awscdk.Fn_Join(jsii.String(""), &[]*string{s.API.RestApiId(), jsii.String(".execute-api."), stack.Region(),
		jsii.String("."), stack.UrlSuffix()})
	for _, fn := range []awslambda.Function{s.Functions.API, s.Functions.Processor, s.Functions.Sweeper} {
		fn.AddEnvironment(jsii.String("WEBHOOK_API_HOSTS"), apiDomain, nil)
	}
	s.Alarms = NewAlarms(c, "Alarms", AlarmsProps{
		Queues:    s.Queues,
		Processor: s.Functions.Processor,
		Sweeper:   s.Functions.Sweeper,
		API:       s.API,
	})
	s.SignalAlarms = NewSignalAlarms(c, "SignalAlarms", SignalAlarmsProps{
		API: s.API, Functions: s.Functions, Counter: s.Counters.Function, CounterQueue: s.Counters.Queue, Database: s.Database,
	})
	// Every alarm of the stack reports to the operator's topic, and shows on the dashboard.
	alarms := append(s.Alarms.All(), s.Counters.DeadLetters, s.Counters.Errors, s.Counters.Mismatches, s.Counters.SweepErrors)
	alarms = append(alarms, s.SignalAlarms.All()...)
	s.Notifications = NewNotificationsTo(c, "Notifications", p.AlarmTopic, p.AlarmEmail)
	s.Notifications.Notify(alarms...)
	s.Dashboard = NewDashboard(c, "Dashboard", DashboardProps{
		API: s.API, Functions: s.Functions, Counter: s.Counters.Function, Database: s.Database, Alarms: alarms,
		Queues: []NamedQueue{{"events", s.Queues.Main}, {"events-dlq", s.Queues.DeadLetter},
			{"counters", s.Counters.Queue}, {"counters-dlq", s.Counters.DeadLetter}},
	})

	// The cdk-nag findings the construct accepts, each with its reason (nag.go): a user's app that runs
	// the AwsSolutions checks sees none of them.
	addNagSuppressions(s, p.PublicAPI)
	return s
}
