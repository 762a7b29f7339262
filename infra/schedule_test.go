package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of schedule.go: the EventBridge rule that invokes the sweeper.

func TestSweepSchedule(t *testing.T) {
	s := synth(t, variantAWS)
	sweeperID := s.ref(t, s.stack.Functions.Sweeper.FunctionName())
	check(t, "EventBridge rule, not Scheduler", func() {
		s.template.ResourceCountIs(jsii.String("AWS::Scheduler::Schedule"), jsii.Number(0))
		s.template.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(1))
	})
	check(t, "rate rule targets the sweeper", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Events::Rule"), obj(map[string]any{
			"ScheduleExpression": rateExpression(sweepRate),
			"State":              "ENABLED",
			"Targets": []any{assertions.Match_ObjectLike(obj(map[string]any{
				"Arn": map[string]any{"Fn::GetAtt": []any{sweeperID, "Arn"}},
			}))},
		}))
	})
	check(t, "EventBridge may invoke the sweeper", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), obj(map[string]any{
			"Action":       "lambda:InvokeFunction",
			"Principal":    "events.amazonaws.com",
			"FunctionName": map[string]any{"Fn::GetAtt": []any{sweeperID, "Arn"}},
		}))
	})
	if sweeperTimeout > sweepRate {
		t.Errorf("sweeper timeout %s longer than its schedule %s: more than two ticks could overlap", sweeperTimeout, sweepRate)
	}
}

func rateExpression(d time.Duration) string {
	if n := int(d.Minutes()); n != 1 {
		return fmt.Sprintf("rate(%d minutes)", n)
	}
	return "rate(1 minute)"
}
