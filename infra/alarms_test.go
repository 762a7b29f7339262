package main

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of alarms.go. Each alarm is found by its metric and the dimension naming what it watches
// (a queue, the processor, the API), so no check can be satisfied by another alarm.

func TestAlarms(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	check(t, "four alarms", func() { tpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(4)) })
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
