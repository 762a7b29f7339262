package infra

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The counter service's tuning (internal/counters; README "Counters").
const (
	counterTimeout      = 30 * time.Second // a batch of batchSize messages, one transaction.
	counterMaxOpenConns = 2                // one transaction per batch, and the marks after it.
	// counterConcurrency is the mapping's ScalingConfig.MaximumConcurrency: batches for one user
	// queue on the user's bucket lock, so more concurrency buys little and costs connections.
	counterConcurrency = 4
	// databaseCounterUser is the counter function's database user (the counter role of
	// internal/mysql/users.go).
	databaseCounterUser = "exactlyonce_counter"
	// counterMismatchesMetric is what the sweeper publishes after reconciling a sample of counts
	// (internal/sweeping/counters.go, MetricCounterMismatches).
	counterMismatchesMetric = "CounterMismatches"
	// counterSweepErrorsMetric is 1 for a sweep whose counter step failed (republish, reconcile or
	// prune; internal/sweeping/counters.go, MetricCounterSweepErrors), else 0.
	counterSweepErrorsMetric = "CounterSweepErrors"
)

// CounterServiceProps configures NewCounterService.
type CounterServiceProps struct {
	Functions FunctionsProps     // the asset directory, architecture and database access of every function
	Sweeper   awslambda.Function // republishes notifications left unpublished, reconciles, prunes
	Trigger   constructs.IDependable
	// CapConcurrency sets the mapping's maximum concurrency (LocalStack does not implement it).
	CapConcurrency bool
}

// CounterService is the counter service: its queue and DLQ, the function they trigger, and the
// topic its result notifications are published to.
type CounterService struct {
	constructs.Construct
	Queue, DeadLetter awssqs.Queue
	Function          awslambda.Function
	Topic             awssns.Topic
	SnsEndpoint       awsec2.InterfaceVpcEndpoint // nil in the LocalStack variant
	DeadLetters       awscloudwatch.Alarm
	Errors            awscloudwatch.Alarm
	Mismatches        awscloudwatch.Alarm
	SweepErrors       awscloudwatch.Alarm
}

// NewCounterService creates the counter service. The function sits in the stack as
// CounterFunction (the name `sam local invoke` takes), with its own role, log group and database
// user; its queues have fixed names (<stack>-counters, <stack>-counters-dlq) for the reason
// NewQueues gives.
func NewCounterService(scope constructs.Construct, id string, props CounterServiceProps) *CounterService {
	c := constructs.NewConstruct(scope, &id)
	stack := awscdk.Stack_Of(c)
	s := &CounterService{Construct: c}

	mainName := *stack.StackName() + "-counters"
	source := awssqs.Queue_FromQueueArn(c, jsii.String("QueueRef"), stack.FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("sqs"), Resource: jsii.String(mainName),
	}))
	s.DeadLetter = awssqs.NewQueue(c, jsii.String("DeadLetterQueue"), &awssqs.QueueProps{
		QueueName:       jsii.String(mainName + "-dlq"),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Seconds(jsii.Number(dlqRetention.Seconds())),
		RedriveAllowPolicy: &awssqs.RedriveAllowPolicy{
			RedrivePermission: awssqs.RedrivePermission_BY_QUEUE,
			SourceQueues:      &[]awssqs.IQueue{source},
		},
	})
	s.Queue = awssqs.NewQueue(c, jsii.String("Queue"), &awssqs.QueueProps{
		QueueName:         jsii.String(mainName),
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		RetentionPeriod:   awscdk.Duration_Seconds(jsii.Number(queueRetention.Seconds())),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(6 * counterTimeout.Seconds())),
		DeadLetterQueue:   &awssqs.DeadLetterQueue{Queue: s.DeadLetter, MaxReceiveCount: jsii.Number(maxReceiveCount)},
	})

	// Encrypted with the AWS managed key, TLS only. Interested services subscribe to it.
	s.Topic = awssns.NewTopic(c, jsii.String("Results"), &awssns.TopicProps{
		TopicName:  jsii.String(*stack.StackName() + "-counter-results"),
		MasterKey:  awskms.Alias_FromAliasName(c, jsii.String("SnsKey"), jsii.String("alias/aws/sns")),
		EnforceSSL: jsii.Bool(true),
	})

	s.Function = newFunction(scope, props.Functions, functionSpec{
		name: "counter", description: "Counts entities from the counters queue, exactly once each, and publishes each result",
		timeout: counterTimeout, maxOpenConns: counterMaxOpenConns, dbUser: databaseCounterUser, traced: true,
	})
	s.Function.Node().DefaultChild().Node().AddDependency(props.Trigger)
	mapping := &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(batchSize),
		MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(maxBatchingWindow.Seconds())),
		ReportBatchItemFailures: jsii.Bool(true),
	}
	if props.CapConcurrency {
		mapping.MaxConcurrency = jsii.Number(counterConcurrency)
	}
	s.Function.AddEventSource(awslambdaeventsources.NewSqsEventSource(s.Queue, mapping))

	// The counter function publishes each batch's notifications; the sweeper publishes those left
	// unpublished. Nothing else may publish.
	for _, fn := range []awslambda.Function{s.Function, props.Sweeper} {
		s.Topic.GrantPublish(fn)
		fn.AddEnvironment(jsii.String("COUNTER_TOPIC_ARN"), s.Topic.TopicArn(), nil)
	}
	s.Function.AddEnvironment(jsii.String("QUEUE_URL"), s.Queue.QueueUrl(), nil)

	if n := props.Functions.Access.Network; n != nil {
		// The functions have no route out of the VPC: SNS through an interface endpoint that admits
		// these two only, to this topic only.
		sns := n.Vpc.AddInterfaceEndpoint(jsii.String("SnsEndpoint"), &awsec2.InterfaceVpcEndpointOptions{
			Service:           awsec2.InterfaceVpcEndpointAwsService_SNS(),
			Subnets:           n.FunctionSubnets(),
			PrivateDnsEnabled: jsii.Bool(true),
			Open:              jsii.Bool(false),
		})
		s.SnsEndpoint = sns
		for _, fn := range []awslambda.Function{s.Function, props.Sweeper} {
			fn.Connections().AllowTo(sns, awsec2.Port_Tcp(jsii.Number(443)), jsii.String("to the SNS endpoint"))
			sns.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Principals: &[]awsiam.IPrincipal{awsiam.NewArnPrincipal(fn.Role().RoleArn())},
				Actions:    jsii.Strings("sns:Publish"),
				Resources:  jsii.Strings(*s.Topic.TopicArn()),
			}))
		}
		// Visibility extension of slow batches.
		s.Function.Connections().AllowTo(n.SqsEndpoint, awsec2.Port_Tcp(jsii.Number(443)), jsii.String("counter to the SQS endpoint"))
		n.SqsEndpoint.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Principals: &[]awsiam.IPrincipal{awsiam.NewArnPrincipal(s.Function.Role().RoleArn())},
			Actions:    jsii.Strings(VisibilityExtensionActions...),
			Resources:  jsii.Strings(*s.Queue.QueueArn()),
		}))
	}

	minute := awscdk.Duration_Minutes(jsii.Number(1))
	s.DeadLetters = s.DeadLetter.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Period: minute, Statistic: jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("DeadLetters"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("Counter messages in the dead-letter queue: malformed, or failed 5 times. Inspect, fix, then redrive." +
			runbook("the-dlq-has-messages")),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	s.Errors = s.Function.MetricErrors(&awscloudwatch.MetricOptions{
		Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum"),
	}).CreateAlarm(c, jsii.String("Errors"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The counter function failed whole invocations (crash, timeout); per-message failures are reported, not errors." +
			runbook("a-function-fails-whole-invocations")),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	s.Mismatches = awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(sweeperMetricsNamespace),
		MetricName:    jsii.String(counterMismatchesMetric),
		DimensionsMap: &map[string]*string{sweeperMetricDimension: props.Sweeper.FunctionName()},
		Period:        minute,
		Statistic:     jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("Mismatches"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The sweeper found a count that differs from its entities (sweeper log: \"a count differs from its entities\")." +
			runbook("a-count-differs-from-its-entities")),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	// A failed step is retried by the next sweep (a minute later) and only logged as a warning; a
	// step that fails in 3 sweeps of the last 5 (the topic unreachable, its permission gone) leaves
	// notifications unpublished or counts unreconciled, and needs a person.
	s.SweepErrors = awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(sweeperMetricsNamespace),
		MetricName:    jsii.String(counterSweepErrorsMetric),
		DimensionsMap: &map[string]*string{sweeperMetricDimension: props.Sweeper.FunctionName()},
		Period:        minute,
		Statistic:     jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("SweepErrors"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The sweeper's counter step (republish, reconcile, prune) failed in 3 of the last 5 minutes " +
			"(sweeper log: \"sweeper: counter ... failed\")." + runbook("the-counter-sweep-fails")),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(sweeperAlarmEvaluations),
		DatapointsToAlarm:  jsii.Number(sweeperAlarmDatapoints),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	awscdk.NewCfnOutput(stack, jsii.String("CounterQueueUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("The counters queue: send {\"entityId\",\"entityType\",\"userId\",\"action\"} here"),
		Value:       s.Queue.QueueUrl(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("CounterTopicArn"), &awscdk.CfnOutputProps{
		Description: jsii.String("The topic of the counter service's result notifications: subscribe to it"),
		Value:       s.Topic.TopicArn(),
	})
	return s
}
