package infra

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// AlarmsProps names what NewAlarms watches.
type AlarmsProps struct {
	Queues    *Queues
	Processor awslambda.IFunction
	Sweeper   awslambda.IFunction
	API       awsapigateway.RestApi
}

// Alarms are the signals that exactly-once processing has stopped being true or timely. The stack
// makes each report to the alarm topic (notify.go); each description names its runbook entry.
type Alarms struct {
	constructs.Construct
	DeadLetters    awscloudwatch.Alarm
	QueueAge       awscloudwatch.Alarm
	ProcessorError awscloudwatch.Alarm
	API5xx         awscloudwatch.Alarm
	// The sweeper is the only path for an event whose message was lost: these two say it stopped.
	SweeperErrors awscloudwatch.Alarm
	PendingAge    awscloudwatch.Alarm
}

// The sweeper's alarms. docs/deploy.md ("Alarms") gives the reasoning; the tests read these.
const (
	// sweepGrace is SWEEP_GRACE as the sweeper runs: the stack leaves it at the sweeper's default.
	sweepGrace = 10 * time.Second
	// pendingAgeAlarm is the age of the oldest waiting event above which the sweeper has failed to
	// take it. A working sweeper claims every pending event (and every expired lease) older than its
	// grace, whatever its queue message is doing: an event becomes due sweepGrace after its creation,
	// and the sweeper agent of its shard claims it within a poll interval; should that invocation
	// die, the next starts at most sweepRate later and takes the shard within an expiration (30 s),
	// well within sweeperTimeout. 145 s.
	pendingAgeAlarm = sweepGrace + sweepRate + sweeperTimeout
	// Both alarms look at one-minute periods (one sweeper run each) and need 3 bad ones out of the
	// last 5: a sweeper that fails or falls silent alarms in 3 to 5 minutes, while one failed run (a
	// database failover, a deploy) or one late or missing datapoint does not.
	sweeperAlarmPeriod      = time.Minute
	sweeperAlarmEvaluations = 5
	sweeperAlarmDatapoints  = 3
	sweeperMetricsNamespace = "ExactlyOnce"             // sweeping.DefaultNamespace
	sweeperMetricPendingAge = "OldestPendingAgeSeconds" // sweeping.MetricOldestPendingAge
	sweeperMetricDimension  = "FunctionName"            // sweeping.FunctionNameDimension
)

// All returns the alarms.
func (a *Alarms) All() []awscloudwatch.Alarm {
	return []awscloudwatch.Alarm{a.DeadLetters, a.QueueAge, a.ProcessorError, a.API5xx, a.SweeperErrors, a.PendingAge}
}

// NewAlarms creates the alarms.
func NewAlarms(scope constructs.Construct, id string, props AlarmsProps) *Alarms {
	c := constructs.NewConstruct(scope, &id)
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	fiveMinutes := awscdk.Duration_Minutes(jsii.Number(5))
	a := &Alarms{Construct: c}

	a.DeadLetters = props.Queues.DeadLetter.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Period: minute, Statistic: jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("DeadLetters"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription:   jsii.String("Messages in the dead-letter queue: an event failed maxReceiveCount times. Inspect, fix, then redrive." + runbook("the-dlq-has-messages")),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	a.QueueAge = props.Queues.Main.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
		Period: minute, Statistic: jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("QueueAge"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The oldest message on the events queue has waited over 5 minutes for 5 minutes: the processor is not keeping up or keeps failing." +
			runbook("queue-messages-are-getting-old")),
		Threshold:          jsii.Number(queueAgeAlarmSeconds),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(5),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	a.ProcessorError = props.Processor.MetricErrors(&awscloudwatch.MetricOptions{
		Period: fiveMinutes, Statistic: jsii.String("Sum"),
	}).CreateAlarm(c, jsii.String("ProcessorErrors"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The processor failed whole batches (crash, timeout or returned error); per-message failures are reported, not errors." +
			runbook("a-function-fails-whole-invocations")),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	// 5XXError is 0 or 1 per request, so its Average is the 5xx rate.
	a.API5xx = props.API.MetricServerError(&awscloudwatch.MetricOptions{
		Period: fiveMinutes, Statistic: jsii.String("Average"),
	}).CreateAlarm(c, jsii.String("Api5xxRate"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription:   jsii.String("More than 5% of API requests answered 5xx over 5 minutes." + runbook("the-api-answers-5xx")),
		Threshold:          jsii.Number(api5xxRateThreshold),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	sweeperPeriod := awscdk.Duration_Seconds(jsii.Number(sweeperAlarmPeriod.Seconds()))
	// Errors counts failed runs (a returned error, a timeout) and runs that never started: a
	// sweeper that exits during init (bad configuration) fails each invocation with
	// Runtime.ExitError. No run, no datapoint: missing data is not an error here, the age alarm
	// below treats it as one.
	a.SweeperErrors = props.Sweeper.MetricErrors(&awscloudwatch.MetricOptions{
		Period: sweeperPeriod, Statistic: jsii.String("Sum"),
	}).CreateAlarm(c, jsii.String("SweeperErrors"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The sweeper failed (error, timeout, or could not start) in 3 of the last 5 minutes: " +
			"events whose queue message was lost are not being processed. See its log group." + runbook("the-sweeper-fails")),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(sweeperAlarmEvaluations),
		DatapointsToAlarm:  jsii.Number(sweeperAlarmDatapoints),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	// Published by the sweeper after each run (one EMF line on stdout, internal/sweeping/metrics.go).
	// Missing data is breaching: a sweeper that is not invoked, cannot start, or cannot read the
	// database publishes no age, and silence must not look healthy.
	a.PendingAge = awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(sweeperMetricsNamespace),
		MetricName:    jsii.String(sweeperMetricPendingAge),
		DimensionsMap: &map[string]*string{sweeperMetricDimension: props.Sweeper.FunctionName()},
		Period:        sweeperPeriod,
		Statistic:     jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("PendingAge"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("An event has waited to be claimed longer than a working sweeper allows " +
			"(grace + one schedule interval + one run), or the sweeper published no age (not running, " +
			"cannot start, or cannot read the database), in 3 of the last 5 minutes." + runbook("events-wait-too-long")),
		Threshold:          jsii.Number(pendingAgeAlarm.Seconds()),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(sweeperAlarmEvaluations),
		DatapointsToAlarm:  jsii.Number(sweeperAlarmDatapoints),
		TreatMissingData:   awscloudwatch.TreatMissingData_BREACHING,
	})
	return a
}
