package infra

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The application's metrics (internal/metrics; README "Metrics"): namespace sweeperMetricsNamespace,
// one dimension sweeperMetricDimension = the publishing function's own name.
const (
	metricDeadlockRetries     = "DeadlockRetries"
	metricLockWaitRetries     = "LockWaitRetries"
	metricTransactionDuration = "TransactionDuration" // p99 on the dashboard
	metricTransactions        = "Transactions"        // committed write transactions, exact
	metricTaskDelivered       = "TaskDelivered"
	metricTaskDeliveryFailed  = "TaskDeliveryFailed"
)

// Thresholds of the alarms of this file; docs/deploy.md ("Alarms") gives the reasoning, the tests
// read these.
const (
	// Deadlocks: the bench sees 0-2 per 100,000 events (docs/innodb.md); 1 retry per 100 committed
	// write transactions is 500 times that. Below deadlockMinRetries in a period the rate is noise.
	deadlockRatePercent  = 1
	deadlockMinRetries   = 10
	contentionPeriod     = 5 * time.Minute
	contentionEvaluation = 3 // 3 periods in a row: 15 minutes sustained
	// Lock waits: a retry after a lock wait means a transaction waited innodb_lock_wait_timeout (5 s)
	// for a row another held that long; this design's transactions take milliseconds.
	lockWaitPeriod      = time.Minute
	lockWaitEvaluations = 5
	lockWaitDatapoints  = 3
	// Task deliveries: more than half failing, with at least taskMinFailures failures, 3 periods in a
	// row. One receiver that is down among many working ones does not trip it; the way out (NAT
	// gateway, DNS, the signing secret) failing for every receiver does.
	taskFailurePercent = 50
	taskMinFailures    = 10
	// API latency: p99 over 5 minutes, 3 periods in a row. Requests take 50-100 ms; a cold start in
	// the VPC adds about a second. 3 s is above any cold start and below the 5 s lock wait and proxy
	// borrow timeouts, which a request stuck behind a lock or a full pool waits out.
	apiLatencyP99Alarm = 3 * time.Second
	apiLatencyPeriods  = 3
	// Throttles: no function of the stack has reserved concurrency and the mappings cap their own, so
	// a throttle means the account's concurrency is exhausted (or set to 0 on purpose); any one.
	throttlePeriod = 5 * time.Minute
	// Database: maxConnectionsAtMaxACU is max_connections of Aurora MySQL Serverless v2 at maxACU (about
	// 135, docs/deploy.md "Connection budget"); the proxy may use proxyMaxConnsPercent (90 %) of it.
	// At 80 % the pool is near the proxy's ceiling, beyond which borrows wait and then fail (503).
	maxConnectionsAtMaxACU   = 135
	dbConnectionsPercent     = 80
	dbConnectionsEvaluations = 5
	dbConnectionsDatapoints  = 3
	// Capacity: ACUUtilization is the capacity in use as a percentage of maxACU; at 90 % for 15
	// minutes the cluster has scaled as far as it may and the database is the bottleneck.
	acuUtilizationAlarm   = 90
	acuUtilizationPeriods = 3
)

// dbConnectionsAlarm is the threshold of DatabaseConnections (108 at 4 ACU).
const dbConnectionsAlarm = maxConnectionsAtMaxACU * dbConnectionsPercent / 100

// SignalAlarmsProps names what NewSignalAlarms watches. Database is nil in the LocalStack variant.
type SignalAlarmsProps struct {
	API          awsapigateway.RestApi
	Functions    *Functions
	Counter      awslambda.Function
	CounterQueue awssqs.Queue
	Database     *Database
}

// SignalAlarms are the alarms on the signal metrics: contention, task delivery, API latency,
// throttles, the counters queue's age, and the database's connections and capacity.
type SignalAlarms struct {
	constructs.Construct
	DeadlockRate, LockWaits, TaskDeliveryFailures, APILatency, Throttles, CounterQueueAge awscloudwatch.Alarm
	// nil in the LocalStack variant.
	DatabaseConnections, DatabaseCapacity awscloudwatch.Alarm
}

// All returns the alarms that exist.
func (a *SignalAlarms) All() []awscloudwatch.Alarm {
	var out []awscloudwatch.Alarm
	for _, x := range []awscloudwatch.Alarm{a.DeadlockRate, a.LockWaits, a.TaskDeliveryFailures, a.APILatency,
		a.Throttles, a.CounterQueueAge, a.DatabaseConnections, a.DatabaseCapacity} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// runbook is the description's pointer to the alarm's runbook entry.
func runbook(anchor string) string { return " Runbook: docs/runbook.md#" + anchor }

// appMetric is one of the application's EMF metrics as published by fn.
func appMetric(name string, fn awslambda.IFunction, statistic string, period time.Duration) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(sweeperMetricsNamespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &map[string]*string{sweeperMetricDimension: fn.FunctionName()},
		Statistic:     jsii.String(statistic),
		Period:        duration(period),
	})
}

func duration(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(d.Seconds()))
}

// sumOf adds up metrics in an expression: it returns the terms "FILL(p0,0)+FILL(p1,0)..." and
// puts the metrics in using under prefix0, prefix1, ... A function that published nothing in a
// period counts as 0 there, so one silent function does not blank the sum.
func sumOf(prefix string, metrics []awscloudwatch.IMetric, using map[string]awscloudwatch.IMetric) string {
	terms := make([]string, len(metrics))
	for i, m := range metrics {
		id := fmt.Sprintf("%s%d", prefix, i)
		using[id] = m
		terms[i] = fmt.Sprintf("FILL(%s,0)", id)
	}
	return "(" + strings.Join(terms, "+") + ")"
}

// perFunction returns metric name of each function.
func perFunction(name, statistic string, period time.Duration, fns ...awslambda.IFunction) []awscloudwatch.IMetric {
	out := make([]awscloudwatch.IMetric, len(fns))
	for i, fn := range fns {
		out[i] = appMetric(name, fn, statistic, period)
	}
	return out
}

// NewSignalAlarms creates the alarms.
func NewSignalAlarms(scope constructs.Construct, id string, props SignalAlarmsProps) *SignalAlarms {
	c := constructs.NewConstruct(scope, &id)
	a := &SignalAlarms{Construct: c}
	f := props.Functions
	writers := []awslambda.IFunction{f.API, f.Processor, f.Sweeper, props.Counter}
	delivering := []awslambda.IFunction{f.Processor, f.Sweeper}

	// Deadlock retries per 100 committed write transactions, across every function that writes.
	using := map[string]awscloudwatch.IMetric{}
	retries := sumOf("r", perFunction(metricDeadlockRetries, "Sum", contentionPeriod, writers...), using)
	commits := sumOf("c", perFunction(metricTransactions, "Sum", contentionPeriod, writers...), using)
	a.DeadlockRate = awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		// +1: a period of retries without a single commit reads as a high rate, not a division by 0.
		Expression:   jsii.String(fmt.Sprintf("IF(%s >= %d, 100 * %s / (%s + 1), 0)", retries, deadlockMinRetries, retries, commits)),
		UsingMetrics: &using,
		Label:        jsii.String("deadlock retries per 100 committed write transactions"),
		Period:       duration(contentionPeriod),
	}).CreateAlarm(c, jsii.String("DeadlockRate"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String(fmt.Sprintf("More than %d deadlock retries per 100 committed write transactions (at least %d retries) "+
			"in each of the last 3 five-minute periods: the claims or the bucket statements contend far beyond normal.",
			deadlockRatePercent, deadlockMinRetries) + runbook("deadlocks-are-frequent")),
		Threshold:          jsii.Number(deadlockRatePercent),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(contentionEvaluation),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	using = map[string]awscloudwatch.IMetric{}
	a.LockWaits = awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(sumOf("w", perFunction(metricLockWaitRetries, "Sum", lockWaitPeriod, writers...), using)),
		UsingMetrics: &using,
		Label:        jsii.String("lock wait retries"),
		Period:       duration(lockWaitPeriod),
	}).CreateAlarm(c, jsii.String("LockWaits"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("Transactions retried after waiting 5 s for a row lock (error 1205) in 3 of the last 5 minutes: " +
			"something holds rows for seconds." + runbook("transactions-wait-for-locks")),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(lockWaitEvaluations),
		DatapointsToAlarm:  jsii.Number(lockWaitDatapoints),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	using = map[string]awscloudwatch.IMetric{}
	failed := sumOf("f", perFunction(metricTaskDeliveryFailed, "Sum", contentionPeriod, delivering...), using)
	delivered := sumOf("d", perFunction(metricTaskDelivered, "Sum", contentionPeriod, delivering...), using)
	a.TaskDeliveryFailures = awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(fmt.Sprintf("IF(%s >= %d, 100 * %s / (%s + %s), 0)", failed, taskMinFailures, failed, failed, delivered)),
		UsingMetrics: &using,
		Label:        jsii.String("failed deliveries, % of attempts"),
		Period:       duration(contentionPeriod),
	}).CreateAlarm(c, jsii.String("TaskDeliveryFailures"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String(fmt.Sprintf("More than %d%% of webhook delivery attempts failed (at least %d failures) in each of the "+
			"last 3 five-minute periods: receivers down, or the way out (NAT gateway, DNS, signing secret) broken.",
			taskFailurePercent, taskMinFailures) + runbook("webhook-deliveries-fail")),
		Threshold:          jsii.Number(taskFailurePercent),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(contentionEvaluation),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	a.APILatency = props.API.MetricLatency(&awscloudwatch.MetricOptions{
		Period: duration(5 * time.Minute), Statistic: jsii.String("p99"),
	}).CreateAlarm(c, jsii.String("ApiLatency"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String(fmt.Sprintf("The API's p99 latency exceeded %s in each of the last 3 five-minute periods.",
			apiLatencyP99Alarm) + runbook("the-api-is-slow")),
		Threshold:          jsii.Number(float64(apiLatencyP99Alarm.Milliseconds())),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(apiLatencyPeriods),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	using = map[string]awscloudwatch.IMetric{}
	var throttles []awscloudwatch.IMetric
	for _, fn := range writers {
		throttles = append(throttles, fn.MetricThrottles(&awscloudwatch.MetricOptions{Period: duration(throttlePeriod), Statistic: jsii.String("Sum")}))
	}
	a.Throttles = awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(sumOf("t", throttles, using)),
		UsingMetrics: &using,
		Label:        jsii.String("throttles of api, processor, sweeper, counter"),
		Period:       duration(throttlePeriod),
	}).CreateAlarm(c, jsii.String("Throttles"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("Lambda throttled an invocation of the api, processor, sweeper or counter function in the last 5 minutes: " +
			"the account's concurrency is exhausted, or a function's was set to 0." + runbook("a-function-is-throttled")),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	a.CounterQueueAge = props.CounterQueue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
		Period: duration(time.Minute), Statistic: jsii.String("Maximum"),
	}).CreateAlarm(c, jsii.String("CounterQueueAge"), &awscloudwatch.CreateAlarmOptions{
		AlarmDescription: jsii.String("The oldest message on the counters queue has waited over 5 minutes for 5 minutes: " +
			"the counter function is not keeping up or keeps failing." + runbook("queue-messages-are-getting-old")),
		Threshold:          jsii.Number(queueAgeAlarmSeconds),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(5),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})

	if db := props.Database; db != nil {
		a.DatabaseConnections = db.Cluster.MetricDatabaseConnections(&awscloudwatch.MetricOptions{
			Period: duration(time.Minute), Statistic: jsii.String("Maximum"),
		}).CreateAlarm(c, jsii.String("DatabaseConnections"), &awscloudwatch.CreateAlarmOptions{
			AlarmDescription: jsii.String(fmt.Sprintf("The cluster held more than %d connections (%d%% of the ~%d max_connections at %v ACU) "+
				"in 3 of the last 5 minutes: the proxy's pool is nearly full.", dbConnectionsAlarm, dbConnectionsPercent,
				maxConnectionsAtMaxACU, maxACU) + runbook("database-connections-near-the-limit")),
			Threshold:          jsii.Number(dbConnectionsAlarm),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(dbConnectionsEvaluations),
			DatapointsToAlarm:  jsii.Number(dbConnectionsDatapoints),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		a.DatabaseCapacity = db.Cluster.MetricACUUtilization(&awscloudwatch.MetricOptions{
			Period: duration(5 * time.Minute), Statistic: jsii.String("Average"),
		}).CreateAlarm(c, jsii.String("DatabaseCapacity"), &awscloudwatch.CreateAlarmOptions{
			AlarmDescription: jsii.String(fmt.Sprintf("The cluster used over %d%% of its maximum capacity (%v ACU) in each of the last 3 "+
				"five-minute periods: it cannot scale further.", acuUtilizationAlarm, maxACU) + runbook("the-database-is-at-its-maximum-capacity")),
			Threshold:          jsii.Number(acuUtilizationAlarm),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(acuUtilizationPeriods),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	return a
}
