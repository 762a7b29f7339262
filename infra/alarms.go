package main

import (
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
	API       awsapigateway.RestApi
}

// Alarms are the four signals that exactly-once processing has stopped being true or timely.
// They have no actions: attach an SNS topic (or look at them in the console) per account policy.
type Alarms struct {
	constructs.Construct
	DeadLetters    awscloudwatch.Alarm
	QueueAge       awscloudwatch.Alarm
	ProcessorError awscloudwatch.Alarm
	API5xx         awscloudwatch.Alarm
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
		AlarmDescription:   jsii.String("Messages in the dead-letter queue: an event failed maxReceiveCount times. Inspect, fix, then redrive."),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	a.QueueAge = props.Queues.Main.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
		Period: minute, Statistic: jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("QueueAge"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription:   jsii.String("The oldest message on the events queue has waited over 5 minutes for 5 minutes: the processor is not keeping up or keeps failing."),
		Threshold:          jsii.Number(queueAgeAlarmSeconds),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(5),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	a.ProcessorError = props.Processor.MetricErrors(&awscloudwatch.MetricOptions{
		Period: fiveMinutes, Statistic: jsii.String("Sum"),
	}).CreateAlarm(c, jsii.String("ProcessorErrors"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription:   jsii.String("The processor failed whole batches (crash, timeout or returned error); per-message failures are reported, not errors."),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	// 5XXError is 0 or 1 per request, so its Average is the 5xx rate.
	a.API5xx = props.API.MetricServerError(&awscloudwatch.MetricOptions{
		Period: fiveMinutes, Statistic: jsii.String("Average"),
	}).CreateAlarm(c, jsii.String("Api5xxRate"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription:   jsii.String("More than 5% of API requests answered 5xx over 5 minutes."),
		Threshold:          jsii.Number(api5xxRateThreshold),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	return a
}
