package infra

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Tests of alarms_signals.go. Each alarm is found through its construct (its logical ID), then checked
// alone: its metrics (namespace, name, the dimension naming the function, queue, API or cluster, the
// statistic and the period), its threshold, its periods, and its actions on the alarm topic.

// alarmID returns the logical ID of an alarm construct.
func (s *synthesized) alarmID(a awscloudwatch.Alarm) string {
	return *s.stack.GetLogicalId(a.Node().DefaultChild().(awscdk.CfnElement))
}

// fnMetric is the pattern of one metric of a metric-math alarm: namespace/name of one function.
func fnMetric(t *testing.T, s *synthesized, namespace, name string, fn awslambda.IFunction, stat string, period time.Duration) any {
	return assertions.Match_ObjectLike(obj(map[string]any{
		"MetricStat": map[string]any{
			"Metric": map[string]any{
				"Namespace":  namespace,
				"MetricName": name,
				"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": refTo(s.ref(t, fn.FunctionName()))}},
			},
			"Period": period.Seconds(),
			"Stat":   stat,
		},
		"ReturnData": false,
	}))
}

func TestSignalAlarms(t *testing.T) {
	s := synth(t, variantAWS)
	a := s.stack.SignalAlarms
	f := s.stack.Functions
	topic := refTo(s.ref(t, s.stack.Notifications.Topic.TopicArn()))
	writers := []awslambda.IFunction{f.API, f.Processor, f.Sweeper, s.stack.Counters.Function}
	workers := []awslambda.IFunction{f.Processor, f.Sweeper}

	// mathAlarm checks an alarm on an expression over metrics, and returns the expression.
	mathAlarm := func(t *testing.T, alarm awscloudwatch.Alarm, metrics []any, props map[string]any) string {
		t.Helper()
		expr := assertions.NewCapture(nil)
		only := s.only(t, s.alarmID(alarm))
		props["Metrics"] = assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{"Expression": expr, "ReturnData": true}))))
		props["AlarmActions"] = []any{topic}
		props["OKActions"] = []any{topic}
		must(t, "the alarm", func() {
			only.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), assertions.Match_ObjectLike(&props))
		})
		// Each metric on its own: arrayWith keeps the order of its patterns, the template sorts by id.
		for i, m := range metrics {
			check(t, fmt.Sprintf("metric %d of the expression", i), func() {
				only.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{"Metrics": assertions.Match_ArrayWith(arr(m))}))
			})
		}
		if n := len(metrics) + 1; len(*only.FindResources(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"Properties": assertions.Match_ObjectLike(obj(map[string]any{"Metrics": assertions.Match_AnyValue()}))}))) != 1 {
			t.Fatalf("alarm not found")
		} else if got := len(s.resources()[s.alarmID(alarm)].(map[string]any)["Properties"].(map[string]any)["Metrics"].([]any)); got != n {
			t.Errorf("%d metrics and expressions in the alarm, want %d (no other function's, nothing unchecked)", got, n)
		}
		return *expr.AsString()
	}
	metricsOf := func(namespace, name, stat string, period time.Duration, fns ...awslambda.IFunction) []any {
		var out []any
		for _, fn := range fns {
			out = append(out, fnMetric(t, s, namespace, name, fn, stat, period))
		}
		return out
	}

	t.Run("deadlock rate", func(t *testing.T) {
		metrics := append(metricsOf("ExactlyOnce", "DeadlockRetries", "Sum", 5*time.Minute, writers...),
			metricsOf("ExactlyOnce", "Transactions", "Sum", 5*time.Minute, writers...)...)
		expr := mathAlarm(t, a.DeadlockRate, metrics, map[string]any{
			"Threshold": 1, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 3,
			"DatapointsToAlarm": assertions.Match_Absent(), "TreatMissingData": "notBreaching",
		})
		// At least 10 retries, then retries per 100 commits.
		if !strings.HasPrefix(expr, "IF(") || !strings.Contains(expr, ">= 10, 100 *") {
			t.Errorf("expression %q: want IF(retries >= 10, 100 * retries / (commits + 1), 0)", expr)
		}
	})
	t.Run("lock waits", func(t *testing.T) {
		mathAlarm(t, a.LockWaits, metricsOf("ExactlyOnce", "LockWaitRetries", "Sum", time.Minute, writers...), map[string]any{
			"Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold", "EvaluationPeriods": 5,
			"DatapointsToAlarm": 3, "TreatMissingData": "notBreaching",
		})
	})
	t.Run("task delivery failures", func(t *testing.T) {
		metrics := append(metricsOf("ExactlyOnce", "TaskDeliveryFailed", "Sum", 5*time.Minute, workers...),
			metricsOf("ExactlyOnce", "TaskDelivered", "Sum", 5*time.Minute, workers...)...)
		expr := mathAlarm(t, a.TaskDeliveryFailures, metrics, map[string]any{
			"Threshold": 50, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 3, "TreatMissingData": "notBreaching",
		})
		if !strings.Contains(expr, ">= 10, 100 *") {
			t.Errorf("expression %q: want IF(failed >= 10, 100 * failed / (failed + delivered), 0)", expr)
		}
	})
	t.Run("throttles of every function a request, a message or the schedule invokes", func(t *testing.T) {
		mathAlarm(t, a.Throttles, metricsOf("AWS/Lambda", "Throttles", "Sum", 5*time.Minute, writers...), map[string]any{
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1, "TreatMissingData": "notBreaching",
		})
	})

	single := []struct {
		what  string
		alarm awscloudwatch.Alarm
		props map[string]any
	}{
		{"API latency p99 over 3 s, 3 periods of 5 minutes", a.APILatency, map[string]any{
			"Namespace": "AWS/ApiGateway", "MetricName": "Latency", "ExtendedStatistic": "p99", "Period": 300,
			"Dimensions": []any{map[string]any{"Name": "ApiName", "Value": s.stack.Resolve(s.stack.API.RestApiName())}},
			"Threshold":  3000, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 3,
		}},
		{"counters queue's oldest message over 5 minutes for 5 minutes", a.CounterQueueAge, map[string]any{
			"Namespace": "AWS/SQS", "MetricName": "ApproximateAgeOfOldestMessage", "Statistic": "Maximum", "Period": 60,
			"Dimensions": []any{map[string]any{"Name": "QueueName", "Value": getAtt(s.ref(t, s.stack.Counters.Queue.QueueUrl()), "QueueName")}},
			"Threshold":  300, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 5,
		}},
		{"database connections over 108 in 3 of 5 minutes", a.DatabaseConnections, map[string]any{
			"Namespace": "AWS/RDS", "MetricName": "DatabaseConnections", "Statistic": "Maximum", "Period": 60,
			"Dimensions": []any{map[string]any{"Name": "DBClusterIdentifier", "Value": refTo(s.ref(t, s.stack.Database.Cluster.ClusterIdentifier()))}},
			"Threshold":  108, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 5, "DatapointsToAlarm": 3,
		}},
		{"database capacity over 90 % for 15 minutes", a.DatabaseCapacity, map[string]any{
			"Namespace": "AWS/RDS", "MetricName": "ACUUtilization", "Statistic": "Average", "Period": 300,
			"Dimensions": []any{map[string]any{"Name": "DBClusterIdentifier", "Value": refTo(s.ref(t, s.stack.Database.Cluster.ClusterIdentifier()))}},
			"Threshold":  90, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 3,
		}},
	}
	for _, c := range single {
		c.props["AlarmActions"] = []any{topic}
		c.props["OKActions"] = []any{topic}
		c.props["TreatMissingData"] = "notBreaching"
		check(t, c.what, func() {
			s.only(t, s.alarmID(c.alarm)).HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), assertions.Match_ObjectLike(&c.props))
		})
	}

	// The connections threshold follows the connection budget: under the proxy's own ceiling.
	if ceiling := maxConnectionsAtMaxACU * proxyMaxConnsPercent / 100; dbConnectionsAlarm >= ceiling {
		t.Errorf("connections alarm at %d, at or above the proxy's ceiling %d: it would fire after borrows already fail", dbConnectionsAlarm, ceiling)
	}
	// Latency: above a cold start, below the waits a stuck request sits out.
	if apiLatencyP99Alarm >= time.Duration(lockWaitTimeoutSecs)*time.Second || apiLatencyP99Alarm >= proxyBorrowTimeout {
		t.Errorf("API latency alarm %s not below the lock wait (%d s) and borrow (%s) timeouts", apiLatencyP99Alarm, lockWaitTimeoutSecs, proxyBorrowTimeout)
	}
}

// The LocalStack variant has no database, and so no database alarms; the others are there.
func TestSignalAlarmsWithoutDatabase(t *testing.T) {
	s := synth(t, variantLocalStack)
	if a := s.stack.SignalAlarms; a.DatabaseConnections != nil || a.DatabaseCapacity != nil || len(a.All()) != 6 {
		t.Errorf("LocalStack variant: %d signal alarms (database ones: %v, %v), want the 6 without a database",
			len(a.All()), a.DatabaseConnections, a.DatabaseCapacity)
	}
}
