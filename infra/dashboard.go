package infra

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The application's metrics the dashboard shows besides those of alarms_signals.go (README
// "Metrics"; namespace and dimension as there).
const (
	metricEventsCreatedSync   = "EventsCreatedSync"
	metricEventsCreatedAsync  = "EventsCreatedAsync"
	metricIdempotentReplays   = "IdempotentReplays"
	metricEventsProcessed     = "EventsProcessed"
	metricClaimBatchSize      = "ClaimBatchSize"
	metricOutcomeBusy         = "OutcomeBusy"
	metricOutcomeMissing      = "OutcomeMissing"
	metricQueueSends          = "QueueSends"
	metricQueueSendFailures   = "QueueSendFailures"
	metricPendingEvents       = "PendingEvents"
	metricTaskDeliveryLatency = "TaskDeliveryLatency"
	metricCounterApplied      = "CounterApplied"
	metricCounterDuplicates   = "CounterDuplicates"
	metricCounterRejected     = "CounterRejected"
)

// NamedQueue is a queue and the short name its lines are labelled with (events, events-dlq, ...).
type NamedQueue struct {
	Name  string
	Queue awssqs.Queue
}

// dashboardPeriod is the period of every graph: one minute, the sweeper's rhythm.
const dashboardPeriod = time.Minute

// DashboardProps names what the dashboard shows. Database is nil in the LocalStack variant.
type DashboardProps struct {
	API       awsapigateway.RestApi
	Functions *Functions
	Counter   awslambda.Function
	// Queues are shown in this order, each queue followed by its DLQ.
	Queues   []NamedQueue
	Database *Database
	Alarms   []awscloudwatch.Alarm
}

// NewDashboard creates the operator's dashboard (<stack>-operations): the state of every alarm, then
// the API, the queues, the events' paths, contention, tasks, counters, the database and the functions.
// docs/runbook.md refers to its graphs by title.
func NewDashboard(scope constructs.Construct, id string, props DashboardProps) awscloudwatch.Dashboard {
	f := props.Functions
	period := duration(dashboardPeriod)
	all := []awslambda.IFunction{f.API, f.Processor, f.Sweeper, props.Counter, f.Migrate}
	writers := []awslambda.IFunction{f.API, f.Processor, f.Sweeper, props.Counter}
	claimers := []awslambda.IFunction{f.Processor, f.Sweeper}

	graph := func(title string, left []awscloudwatch.IMetric, right ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		p := &awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &left, Width: jsii.Number(8), Height: jsii.Number(6), Period: period}
		if len(right) > 0 {
			p.Right = &right
		}
		return awscloudwatch.NewGraphWidget(p)
	}
	app := func(name, statistic string, fns ...awslambda.IFunction) []awscloudwatch.IMetric {
		out := make([]awscloudwatch.IMetric, len(fns))
		for i, fn := range fns {
			out[i] = awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
				Namespace:     jsii.String(sweeperMetricsNamespace),
				MetricName:    jsii.String(name),
				DimensionsMap: &map[string]*string{sweeperMetricDimension: fn.FunctionName()},
				Statistic:     jsii.String(statistic),
				Period:        period,
				Label:         jsii.String(name + " " + *fn.Node().Id()),
			})
		}
		return out
	}
	cat := func(lists ...[]awscloudwatch.IMetric) []awscloudwatch.IMetric {
		var out []awscloudwatch.IMetric
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	opts := func(statistic string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String(statistic)}
	}
	labelled := func(label, statistic string) *awscloudwatch.MetricOptions {
		o := opts(statistic)
		o.Label = jsii.String(label)
		return o
	}

	var rows [][]awscloudwatch.IWidget
	if len(props.Alarms) > 0 {
		alarms := make([]awscloudwatch.IAlarm, len(props.Alarms))
		for i, a := range props.Alarms {
			alarms[i] = a
		}
		rows = append(rows, []awscloudwatch.IWidget{awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
			Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24), Height: jsii.Number(4),
		})})
	}

	api := props.API
	rows = append(rows, []awscloudwatch.IWidget{
		graph("API requests", []awscloudwatch.IMetric{api.MetricCount(labelled("requests", "Sum"))}),
		graph("API latency (ms)", []awscloudwatch.IMetric{
			api.MetricLatency(labelled("Latency p50", "p50")), api.MetricLatency(labelled("Latency p99", "p99")),
			api.MetricIntegrationLatency(labelled("IntegrationLatency p99", "p99")),
		}),
		graph("API errors", []awscloudwatch.IMetric{
			api.MetricClientError(labelled("4XXError", "Sum")), api.MetricServerError(labelled("5XXError", "Sum")),
		}),
	})

	var depth, age, inFlight []awscloudwatch.IMetric
	for _, nq := range props.Queues {
		q, name := nq.Queue, nq.Name
		depth = append(depth, q.MetricApproximateNumberOfMessagesVisible(labelled("visible "+name, "Maximum")))
		inFlight = append(inFlight, q.MetricApproximateNumberOfMessagesNotVisible(labelled("in flight "+name, "Maximum")))
		age = append(age, q.MetricApproximateAgeOfOldestMessage(labelled("oldest "+name, "Maximum")))
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("Queue depth (visible messages)", depth),
		graph("Queue messages in flight", inFlight),
		graph("Oldest message age (s)", age),
	})

	rows = append(rows, []awscloudwatch.IWidget{
		graph("Events created and queued", cat(app(metricEventsCreatedSync, "Sum", f.API), app(metricEventsCreatedAsync, "Sum", f.API),
			app(metricIdempotentReplays, "Sum", f.API), app(metricQueueSends, "Sum", f.API)),
			app(metricQueueSendFailures, "Sum", f.API)...),
		graph("Events processed, per path", cat(app(metricEventsProcessed, "Sum", claimers...)),
			cat(app(metricClaimBatchSize, "Average", claimers...), app(metricOutcomeBusy, "Sum", claimers...), app(metricOutcomeMissing, "Sum", claimers...))...),
		graph("Pending events and oldest pending age (s)", app(metricPendingEvents, "Maximum", f.Sweeper),
			app(sweeperMetricPendingAge, "Maximum", f.Sweeper)...),
	})

	rows = append(rows, []awscloudwatch.IWidget{
		graph("Deadlock retries", app(metricDeadlockRetries, "Sum", writers...)),
		graph("Lock wait retries", app(metricLockWaitRetries, "Sum", writers...)),
		graph("Write transaction duration p99 (ms)", app(metricTransactionDuration, "p99", writers...)),
	})

	rows = append(rows, []awscloudwatch.IWidget{
		graph("Task deliveries", cat(app(metricTaskDelivered, "Sum", claimers...), app(metricTaskDeliveryFailed, "Sum", claimers...))),
		graph("Task delivery latency (ms)", cat(app(metricTaskDeliveryLatency, "p50", claimers...), app(metricTaskDeliveryLatency, "p99", claimers...))),
		graph("Counter messages", cat(app(metricCounterApplied, "Sum", props.Counter), app(metricCounterDuplicates, "Sum", props.Counter),
			app(metricCounterRejected, "Sum", props.Counter))),
	})

	if db := props.Database; db != nil {
		c := db.Cluster
		rows = append(rows, []awscloudwatch.IWidget{
			graph("Database connections", []awscloudwatch.IMetric{c.MetricDatabaseConnections(labelled("DatabaseConnections", "Maximum"))}),
			graph("Database capacity (ACU) and utilisation (%)",
				[]awscloudwatch.IMetric{c.MetricServerlessDatabaseCapacity(labelled("ServerlessDatabaseCapacity", "Maximum"))},
				c.MetricACUUtilization(labelled("ACUUtilization", "Maximum"))),
			graph("Database deadlocks (engine)", []awscloudwatch.IMetric{c.MetricDeadlocks(labelled("Deadlocks", "Sum"))}),
		})
	}

	var throttles, concurrency, errs []awscloudwatch.IMetric
	for _, fn := range all {
		name := *fn.Node().Id()
		throttles = append(throttles, fn.MetricThrottles(labelled("Throttles "+name, "Sum")))
		concurrency = append(concurrency, fn.Metric(jsii.String("ConcurrentExecutions"), labelled("ConcurrentExecutions "+name, "Maximum")))
		errs = append(errs, fn.MetricErrors(labelled("Errors "+name, "Sum")))
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("Lambda throttles", throttles),
		// Against the account's limit: what the whole account and region holds (reserved and
		// unreserved), which throttles every function when it reaches the quota.
		graph("Lambda concurrent executions", concurrency, awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String("AWS/Lambda"), MetricName: jsii.String("ClaimedAccountConcurrency"),
			Statistic: jsii.String("Maximum"), Period: period, Label: jsii.String("ClaimedAccountConcurrency (account)"),
		})),
		graph("Lambda errors", errs),
	})

	widgets := make([]*[]awscloudwatch.IWidget, len(rows))
	for i := range rows {
		widgets[i] = &rows[i]
	}
	return awscloudwatch.NewDashboard(scope, &id, &awscloudwatch.DashboardProps{
		DashboardName:   jsii.String(*awscdk.Stack_Of(scope).StackName() + "-operations"),
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
		Widgets:         &widgets,
	})
}
