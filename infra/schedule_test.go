package infra

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
	check(t, "EventBridge rules, not Scheduler: one per sweeper shard", func() {
		s.template.ResourceCountIs(jsii.String("AWS::Scheduler::Schedule"), jsii.Number(0))
		s.template.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(defaultSweeperShards))
	})
	for shard := range defaultSweeperShards {
		check(t, fmt.Sprintf("a rate rule invokes the sweeper with shard %d as its input", shard), func() {
			s.template.HasResourceProperties(jsii.String("AWS::Events::Rule"), obj(map[string]any{
				"ScheduleExpression": rateExpression(sweepRate),
				"State":              "ENABLED",
				"Targets": []any{assertions.Match_ObjectLike(obj(map[string]any{
					"Arn":   map[string]any{"Fn::GetAtt": []any{sweeperID, "Arn"}},
					"Input": fmt.Sprintf(`{"shard":%d}`, shard),
				}))},
			}))
		})
	}
	check(t, "the sweeper knows how many shards there are", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": obj(map[string]any{"Variables": assertions.Match_ObjectLike(obj(map[string]any{
				"SWEEPER_SHARDS": fmt.Sprint(defaultSweeperShards),
			}))}),
		}))
	})
	check(t, "EventBridge may invoke the sweeper", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), obj(map[string]any{
			"Action":       "lambda:InvokeFunction",
			"Principal":    "events.amazonaws.com",
			"FunctionName": map[string]any{"Fn::GetAtt": []any{sweeperID, "Arn"}},
		}))
	})
	// Each invocation is an agent until a few seconds before its deadline, then hands over to the
	// next tick's: the two overlap, so that the shard stays covered, but never three.
	if sweeperTimeout <= sweepRate || sweeperTimeout >= 2*sweepRate {
		t.Errorf("sweeper timeout %s: want longer than its schedule %s (the hand-over overlap) and shorter than two", sweeperTimeout, sweepRate)
	}
	if overlap := sweeperTimeout - sweepRate; overlap <= sweepingAgentStopBefore {
		t.Errorf("the ticks overlap by %s, no more than the %s an invocation stops before its deadline: a shard would go uncovered", overlap, sweepingAgentStopBefore)
	}
}

// The number of sweeper agents is the context's sweeperShards: one rule each, and SWEEPER_SHARDS.
func TestSweeperShardsFromContext(t *testing.T) {
	app := newApp(t, map[string]any{ctxSweeperShards: "3"})
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SweeperShards != 3 {
		t.Fatalf("sweeperShards=3 read as %d", cfg.SweeperShards)
	}
	for _, bad := range []string{"0", "9", "two"} {
		if _, err := ConfigFromContext(newApp(t, map[string]any{ctxSweeperShards: bad}).Node()); err == nil {
			t.Errorf("sweeperShards=%s accepted", bad)
		}
	}
}

func rateExpression(d time.Duration) string {
	if n := int(d.Minutes()); n != 1 {
		return fmt.Sprintf("rate(%d minutes)", n)
	}
	return "rate(1 minute)"
}
