package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// NewSweepSchedule invokes the sweeper every sweepRate with an EventBridge rule. A rule, not
// EventBridge Scheduler: rules with rate() fire in LocalStack too, Scheduler is only mocked there.
func NewSweepSchedule(scope constructs.Construct, id string, sweeper awslambda.IFunction) awsevents.Rule {
	return awsevents.NewRule(scope, &id, &awsevents.RuleProps{
		Description: jsii.String("Sweeps pending events the queue path missed"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(sweepRate.Seconds()))),
		Targets: &[]awsevents.IRuleTarget{
			awseventstargets.NewLambdaFunction(sweeper, &awseventstargets.LambdaFunctionProps{
				// The next tick is a minute away; don't stack up late deliveries.
				RetryAttempts: jsii.Number(0),
				MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(sweepRate.Seconds())),
			}),
		},
	})
}
