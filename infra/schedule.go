package infra

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// NewSweepSchedule invokes the sweeper every sweepRate with one EventBridge rule per shard, each
// passing its shard as the constant input {"shard": i}: every minute, shards invocations start,
// each an agent on its static shard of the hash space for its whole duration (sweeperTimeout, a
// little longer than sweepRate), handing its shard over to the next minute's invocation of the
// same rule (internal/sweeping, HandleAgent). Rules, not EventBridge Scheduler: rules with rate()
// fire in LocalStack too, Scheduler is only mocked there. The first rule keeps the id of the single
// rule of old; the others are id1, id2, ...
func NewSweepSchedule(scope constructs.Construct, id string, sweeper awslambda.IFunction, shards int) []awsevents.Rule {
	var rules []awsevents.Rule
	for i := range shards {
		ruleID := id
		if i > 0 {
			ruleID = fmt.Sprintf("%s%d", id, i)
		}
		rules = append(rules, awsevents.NewRule(scope, &ruleID, &awsevents.RuleProps{
			Description: jsii.String(fmt.Sprintf("Runs sweeper agent %d of %d: pending events the queue path missed", i, shards)),
			Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(sweepRate.Seconds()))),
			Targets: &[]awsevents.IRuleTarget{
				awseventstargets.NewLambdaFunction(sweeper, &awseventstargets.LambdaFunctionProps{
					Event: awsevents.RuleTargetInput_FromObject(map[string]any{"shard": i}),
					// The next tick is a minute away; don't stack up late deliveries.
					RetryAttempts: jsii.Number(0),
					MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(sweepRate.Seconds())),
				}),
			},
		}))
	}
	return rules
}
