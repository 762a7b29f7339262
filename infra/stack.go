package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// ExactlyOnceStackProps configures NewExactlyOnceStack.
type ExactlyOnceStackProps struct {
	awscdk.StackProps
	Config Config
}

// ExactlyOnceStack is the app's stack: the ExactlyOnce construct (exactlyonce.go), configured from the
// context flags, and the stack's outputs.
type ExactlyOnceStack struct {
	awscdk.Stack
	*ExactlyOnce
}

// NewExactlyOnceStack builds the stack. It needs no AWS account, region or context lookups:
// the stack is environment-agnostic and the VPC uses two AZs chosen by Fn::GetAZs at deploy time.
func NewExactlyOnceStack(scope constructs.Construct, id string, props *ExactlyOnceStackProps) *ExactlyOnceStack {
	var sprops awscdk.StackProps
	var cfg Config
	if props != nil {
		sprops, cfg = props.StackProps, props.Config
	}
	if sprops.Description == nil {
		sprops.Description = jsii.String("Exactly-once event processing: API Gateway, SQS, Lambda, Aurora MySQL Serverless v2 behind RDS Proxy")
	}
	stack := awscdk.NewStack(scope, &id, &sprops)
	s := &ExactlyOnceStack{Stack: stack}
	eo := ExactlyOnceProps{AssetDir: cfg.AssetDir, LambdaArch: cfg.LambdaArch, NatGateways: cfg.NatGateways,
		AlarmEmail: cfg.AlarmEmail, PublicAPI: cfg.PublicAPI, SweeperShards: cfg.SweeperShards,
		Retention: RetentionSettings{Window: cfg.HistoryRetention}}
	if cfg.LocalStack {
		eo.External = &ExternalDatabase{DSN: cfg.DBDSN, AWSEndpointURL: cfg.AWSEndpointURL}
	}
	// "Default": the construct adds nothing to its resources' logical IDs, which are those of the
	// stack before it was a construct (a deployed stack updates in place).
	s.ExactlyOnce = NewExactlyOnce(stack, "Default", eo)

	awscdk.NewCfnOutput(stack, jsii.String("ApiUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Base URL of the events API (append events, events/async, events/{id})"),
		Value:       s.API.Url(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("QueueUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Main SQS queue the api sends to and the processor consumes"),
		Value:       s.Queues.Main.QueueUrl(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("DeadLetterQueueUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("Dead-letter queue (redrive with StartMessageMoveTask)"),
		Value:       s.Queues.DeadLetter.QueueUrl(),
	})
	awscdk.NewCfnOutput(stack, jsii.String("WebhookSecretArn"), &awscdk.CfnOutputProps{
		Description: jsii.String("Secrets Manager secret the webhooks are signed with: receivers verify with whsec_<its value>"),
		Value:       s.Webhooks.Secret.SecretArn(),
	})
	if s.Network != nil && len(s.Network.NatAddresses) > 0 {
		awscdk.NewCfnOutput(stack, jsii.String("DeliverySourceIps"), &awscdk.CfnOutputProps{
			Description: jsii.String("Public IPv4 addresses every webhook delivery comes from (the NAT gateways'), comma-separated"),
			Value:       awscdk.Fn_Join(jsii.String(","), &s.Network.NatAddresses),
		})
	}
	if s.Database != nil {
		awscdk.NewCfnOutput(stack, jsii.String("DatabaseProxyEndpoint"), &awscdk.CfnOutputProps{
			Description: jsii.String("RDS Proxy endpoint the functions connect to (IAM auth, TLS)"),
			Value:       s.Database.Proxy.Endpoint(),
		})
		awscdk.NewCfnOutput(stack, jsii.String("DatabaseSecretArn"), &awscdk.CfnOutputProps{
			Description: jsii.String("Secrets Manager secret with the generated admin credentials (used by the proxy)"),
			Value:       s.Database.Cluster.Secret().SecretArn(),
		})
	}

	return s
}

func lambdaArchitecture(name string) awslambda.Architecture {
	if name == "x86_64" {
		return awslambda.Architecture_X86_64()
	}
	return awslambda.Architecture_ARM_64()
}
