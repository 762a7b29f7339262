package infra

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Tests of dashboard.go: the dashboard exists and its body names every metric an operator needs,
// each with the dimension of the resource it is about (a function, a queue, the API, the cluster).

// dashboardBody returns the one dashboard's body with its tokens written as <Ref:ID> and
// <GetAtt:ID.Attr>, so a metric reads ["ExactlyOnce","EventsProcessed","FunctionName","<Ref:...>".
func dashboardBody(t *testing.T, s *synthesized) string {
	t.Helper()
	found := s.template.FindResources(jsii.String("AWS::CloudWatch::Dashboard"), nil)
	if len(*found) != 1 {
		t.Fatalf("%d dashboards, want 1", len(*found))
	}
	var b strings.Builder
	for _, r := range *found {
		body := (*r)["Properties"].(map[string]any)["DashboardBody"]
		join, ok := body.(map[string]any)["Fn::Join"].([]any)
		if !ok {
			t.Fatalf("dashboard body %v, want Fn::Join", body)
		}
		for _, part := range join[1].([]any) {
			switch p := part.(type) {
			case string:
				b.WriteString(p)
			case map[string]any:
				if ref, ok := p["Ref"]; ok {
					fmt.Fprintf(&b, "<Ref:%v>", ref)
				} else if ga, ok := p["Fn::GetAtt"].([]any); ok {
					fmt.Fprintf(&b, "<GetAtt:%v.%v>", ga[0], ga[1])
				} else {
					b.WriteString(mustJSON(p))
				}
			}
		}
	}
	return b.String()
}

func TestDashboard(t *testing.T) {
	s := synth(t, variantAWS)
	body := dashboardBody(t, s)
	f := s.stack.Functions
	counter := s.stack.Counters.Function
	fnRef := func(fn awslambda.IFunction) string { return "<Ref:" + s.ref(t, fn.FunctionName()) + ">" }
	queueName := func(url *string) string { return "<GetAtt:" + s.ref(t, url) + ".QueueName>" }
	cluster := "<Ref:" + s.ref(t, s.stack.Database.Cluster.ClusterIdentifier()) + ">"
	apiName := *s.stack.API.RestApiName()

	var want []string
	metric := func(namespace, name, dim, value string) {
		want = append(want, fmt.Sprintf(`[%q,%q,%q,"%s"`, namespace, name, dim, value))
	}
	for _, m := range []string{"Count", "Latency", "IntegrationLatency", "4XXError", "5XXError"} {
		metric("AWS/ApiGateway", m, "ApiName", apiName)
	}
	for _, q := range []*string{s.stack.Queues.Main.QueueUrl(), s.stack.Queues.DeadLetter.QueueUrl(),
		s.stack.Counters.Queue.QueueUrl(), s.stack.Counters.DeadLetter.QueueUrl()} {
		for _, m := range []string{"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible", "ApproximateAgeOfOldestMessage"} {
			metric("AWS/SQS", m, "QueueName", queueName(q))
		}
	}
	for _, fn := range []awslambda.IFunction{f.Processor, f.Sweeper} {
		for _, m := range []string{"EventsProcessed", "ClaimBatchSize", "OutcomeBusy", "OutcomeMissing", "TaskDelivered", "TaskDeliveryFailed", "TaskDeliveryLatency"} {
			metric("ExactlyOnce", m, "FunctionName", fnRef(fn))
		}
	}
	for _, m := range []string{"EventsCreatedSync", "EventsCreatedAsync", "IdempotentReplays", "QueueSends", "QueueSendFailures"} {
		metric("ExactlyOnce", m, "FunctionName", fnRef(f.API))
	}
	for _, m := range []string{"PendingEvents", "OldestPendingAgeSeconds"} {
		metric("ExactlyOnce", m, "FunctionName", fnRef(f.Sweeper))
	}
	for _, fn := range []awslambda.IFunction{f.API, f.Processor, f.Sweeper, counter} {
		for _, m := range []string{"DeadlockRetries", "LockWaitRetries", "TransactionDuration"} {
			metric("ExactlyOnce", m, "FunctionName", fnRef(fn))
		}
	}
	for _, m := range []string{"CounterApplied", "CounterDuplicates", "CounterRejected"} {
		metric("ExactlyOnce", m, "FunctionName", fnRef(counter))
	}
	for _, m := range []string{"DatabaseConnections", "ServerlessDatabaseCapacity", "ACUUtilization"} {
		metric("AWS/RDS", m, "DBClusterIdentifier", cluster)
	}
	for _, fn := range []awslambda.IFunction{f.API, f.Processor, f.Sweeper, f.Migrate, counter} {
		for _, m := range []string{"Throttles", "ConcurrentExecutions", "Errors"} {
			metric("AWS/Lambda", m, "FunctionName", fnRef(fn))
		}
	}
	want = append(want, `["AWS/Lambda","ClaimedAccountConcurrency",{`)
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("the dashboard does not show %s", w)
		}
	}
	// The alarm widget lists every alarm of the stack.
	for id := range *s.template.FindResources(jsii.String("AWS::CloudWatch::Alarm"), nil) {
		if !strings.Contains(body, "<GetAtt:"+id+".Arn>") {
			t.Errorf("the dashboard's alarm widget does not list %s", id)
		}
	}
}

// The LocalStack variant has a dashboard too, without the database's graphs.
func TestDashboardWithoutDatabase(t *testing.T) {
	s := synth(t, variantLocalStack)
	body := dashboardBody(t, s)
	if strings.Contains(body, `"AWS/RDS"`) {
		t.Errorf("LocalStack variant's dashboard shows database metrics; it has no database")
	}
	if !strings.Contains(body, `"ExactlyOnce","EventsProcessed"`) {
		t.Errorf("LocalStack variant's dashboard lacks the application's metrics")
	}
}
