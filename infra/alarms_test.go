package infra

import (
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of alarms.go. Each alarm is found by its metric and the dimension naming what it watches
// (a queue, the processor, the API), so no check can be satisfied by another alarm.

func TestAlarms(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	check(t, "six alarms, the counter service's four (counters_test.go) and the signals' eight (alarms_signals_test.go)", func() {
		tpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(6+4+8))
	})
	dlqName := map[string]any{"Fn::GetAtt": []any{s.ref(t, s.stack.Queues.DeadLetter.QueueUrl()), "QueueName"}}
	mainName := map[string]any{"Fn::GetAtt": []any{s.ref(t, s.stack.Queues.Main.QueueUrl()), "QueueName"}}
	processorName := map[string]any{"Ref": s.ref(t, s.stack.Functions.Processor.FunctionName())}
	apiName := s.stack.Resolve(s.stack.API.RestApiName())

	cases := []struct {
		what      string
		namespace string
		metric    string
		dimension map[string]any
		threshold float64
		statistic string
	}{
		{"DLQ has visible messages", "AWS/SQS", "ApproximateNumberOfMessagesVisible", map[string]any{"Name": "QueueName", "Value": dlqName}, 0, "Maximum"},
		{"oldest message on the main queue", "AWS/SQS", "ApproximateAgeOfOldestMessage", map[string]any{"Name": "QueueName", "Value": mainName}, queueAgeAlarmSeconds, "Maximum"},
		{"processor errors", "AWS/Lambda", "Errors", map[string]any{"Name": "FunctionName", "Value": processorName}, 0, "Sum"},
		{"API 5xx rate", "AWS/ApiGateway", "5XXError", map[string]any{"Name": "ApiName", "Value": apiName}, api5xxRateThreshold, "Average"},
	}
	for _, c := range cases {
		check(t, c.what, func() {
			tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
				"Namespace":          c.namespace,
				"MetricName":         c.metric,
				"Dimensions":         assertions.Match_ArrayWith(arr(c.dimension)),
				"ComparisonOperator": "GreaterThanThreshold",
				"Threshold":          c.threshold,
				"Statistic":          c.statistic,
			}))
		})
	}
}

// The sweeper is the only path for events whose message was lost: its two alarms, each found by its
// metric and the dimension naming the sweeper function (a dimension of another function, or of a
// fixed name that another stack's sweeper could publish under, does not match), then checked alone.
func TestSweeperAlarms(t *testing.T) {
	s := synth(t, variantAWS)
	sweeper := refTo(s.ref(t, s.stack.Functions.Sweeper.FunctionName()))

	// alarmOn returns the logical ID of the one alarm on namespace/metric of the sweeper.
	alarmOn := func(namespace, metric string) string {
		t.Helper()
		found := s.template.FindResources(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"Properties": assertions.Match_ObjectLike(obj(map[string]any{
				"Namespace":  namespace,
				"MetricName": metric,
				"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": sweeper}},
			})),
		}))
		if len(*found) != 1 {
			t.Fatalf("%d alarms on %s %s of the sweeper, want 1", len(*found), namespace, metric)
		}
		for id := range *found {
			return id
		}
		return ""
	}

	t.Run("errors, init failures included", func(t *testing.T) {
		id := alarmOn("AWS/Lambda", "Errors")
		threshold := assertions.NewCapture(nil)
		check(t, "sweeper errors: at least 1 a minute in 3 of 5 minutes; no run is no error", func() {
			s.only(t, id).HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), assertions.Match_ObjectLike(obj(map[string]any{
				"Statistic":          "Sum",
				"Period":             sweeperAlarmPeriod.Seconds(),
				"Threshold":          threshold,
				"ComparisonOperator": "GreaterThanOrEqualToThreshold",
				"EvaluationPeriods":  sweeperAlarmEvaluations,
				"DatapointsToAlarm":  sweeperAlarmDatapoints,
				"TreatMissingData":   "notBreaching",
			})))
		})
		if got := *threshold.AsNumber(); got != 1 {
			t.Errorf("sweeper errors threshold %v, want 1: one failed run a minute", got)
		}
	})

	t.Run("oldest pending age, silence breaching", func(t *testing.T) {
		id := alarmOn("ExactlyOnce", "OldestPendingAgeSeconds")
		threshold := assertions.NewCapture(nil)
		missing := assertions.NewCapture(nil)
		check(t, "oldest pending age: above the threshold in 3 of 5 minutes", func() {
			s.only(t, id).HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), assertions.Match_ObjectLike(obj(map[string]any{
				"Statistic":          "Maximum",
				"Period":             sweeperAlarmPeriod.Seconds(),
				"Threshold":          threshold,
				"ComparisonOperator": "GreaterThanThreshold",
				"EvaluationPeriods":  sweeperAlarmEvaluations,
				"DatapointsToAlarm":  sweeperAlarmDatapoints,
				"TreatMissingData":   missing,
			})))
		})
		// A sweeper that never runs, cannot start or cannot read the database publishes no age.
		if got := *missing.AsString(); got != "breaching" {
			t.Errorf("missing data is %q: a sweeper that publishes nothing would look healthy", got)
		}
		// Grace, plus the wait for the next run, plus the run itself: docs/deploy.md.
		want := sweepGrace + sweepRate + sweeperTimeout
		if got := time.Duration(*threshold.AsNumber() * float64(time.Second)); got != want || got != 145*time.Second {
			t.Errorf("oldest pending age threshold %s, want grace %s + rate %s + sweeper timeout %s = 145s (docs/deploy.md)",
				got, sweepGrace, sweepRate, sweeperTimeout)
		}
	})

	// Within minutes: 3 one-minute periods of a sweeper that fails or says nothing.
	if d := time.Duration(sweeperAlarmDatapoints) * sweeperAlarmPeriod; d > 5*time.Minute {
		t.Errorf("a stopped sweeper alarms after %s at the earliest; want within 5 minutes", d)
	}
	if sweeperAlarmDatapoints < 2 {
		t.Errorf("%d datapoint alarms on one failed run or one late datapoint", sweeperAlarmDatapoints)
	}
}
