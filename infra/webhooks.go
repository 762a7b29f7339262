package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// webhookSecretLength is the length of the generated signing secret: letters and digits only, so the
// value is valid standard base64 as it stands (64 characters, a multiple of 4, decode to 48 bytes,
// within the 24 to 64 bytes Standard Webhooks asks of a secret). A receiver is configured with
// "whsec_" + the value; the functions accept it with or without the prefix.
const webhookSecretLength = 64

// WebhooksProps configures NewWebhooks.
type WebhooksProps struct {
	// Delivering are the functions that POST webhooks: the processor and the sweeper.
	Delivering []awslambda.Function
	// Network is nil in the LocalStack variant (no VPC, no security groups).
	Network *Network
	// Secret is the signing secret to use, a user's (ExactlyOnceProps.WebhookSecret); nil: one is
	// generated. Its value must be valid standard base64 of 24 to 64 bytes (Standard Webhooks).
	Secret awssecretsmanager.ISecret
}

// Webhooks is what task delivery needs beyond the code: the signing secret, readable by the
// delivering functions alone, and (in AWS) their way out of the VPC.
type Webhooks struct {
	constructs.Construct
	Secret awssecretsmanager.ISecret
}

// NewWebhooks creates the signing secret (unless props gives one) and wires the delivering functions to it: its ARN as
// WEBHOOK_SECRET_ARN (never the value: internal/secrets reads it at cold start), WEBHOOK_TIMEOUT,
// secretsmanager:GetSecretValue on this secret only, and egress on 443 and 80 to any IPv4 address.
//
// The security group cannot tell a receiver from an address inside the VPC or a link-local one; the
// delivery code refuses those after DNS resolution (docs/deploy.md, "Webhook delivery").
func NewWebhooks(scope constructs.Construct, id string, props WebhooksProps) *Webhooks {
	c := constructs.NewConstruct(scope, &id)
	w := &Webhooks{Construct: c}

	w.Secret = props.Secret
	if w.Secret == nil {
		w.Secret = newSigningSecret(c)
	}

	for _, fn := range props.Delivering {
		// GetSecretValue on this secret alone: not DescribeSecret or ListSecretVersionIds (GrantRead
		// would add them), nothing on the database's secret.
		fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings("secretsmanager:GetSecretValue"),
			Resources: jsii.Strings(*w.Secret.SecretArn()),
		}))
		fn.AddEnvironment(jsii.String("WEBHOOK_SECRET_ARN"), w.Secret.SecretArn(), nil)
		fn.AddEnvironment(jsii.String("WEBHOOK_TIMEOUT"), jsii.String(webhookTimeout.String()), nil)

		if props.Network != nil {
			// Receivers anywhere on the IPv4 internet, through the NAT gateway of the delivery
			// subnets; Secrets Manager's public endpoint is reached the same way (443).
			conns := fn.Connections()
			conns.AllowToAnyIpv4(awsec2.Port_Tcp(jsii.Number(443)), jsii.String("webhook deliveries (https) and Secrets Manager, through the NAT gateway"))
			conns.AllowToAnyIpv4(awsec2.Port_Tcp(jsii.Number(80)), jsii.String("webhook deliveries (http), through the NAT gateway"))
		}
	}
	return w
}

// newSigningSecret is the generated signing secret: by Secrets Manager at creation, so the value never
// appears in the template, the functions' configuration or the CDK's output. Encrypted with the AWS
// managed key (aws/secretsmanager), which the functions' roles may use through Secrets Manager
// without a grant.
func newSigningSecret(c constructs.Construct) awssecretsmanager.Secret {
	return awssecretsmanager.NewSecret(c, jsii.String("SigningSecret"), &awssecretsmanager.SecretProps{
		Description: jsii.String("Standard Webhooks signing secret of the task deliveries: configure receivers with whsec_<this value>"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:          jsii.Number(webhookSecretLength),
			ExcludePunctuation:      jsii.Bool(true),
			IncludeSpace:            jsii.Bool(false),
			RequireEachIncludedType: jsii.Bool(true),
		},
		// Deleted with the stack, like the queues: a new stack has new receivers' configuration anyway.
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
}
