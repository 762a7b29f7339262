package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// addNagSuppressions records, each with its reason, the cdk-nag AwsSolutions findings this stack
// accepts. Suppressions are attached to the narrowest construct (and, for IAM, the exact finding via
// appliesTo). Any finding not listed here fails `make synth` and `make test-infra`.
func addNagSuppressions(s *ExactlyOnce, publicAPI bool) {
	// --- API ---------------------------------------------------------------------------------
	suppress(s.API, true,
		nag("AwsSolutions-APIG2",
			"The gateway validates request parameters; request bodies are validated by the api function, "+
				"which answers with the application's own error codes. A gateway body model would duplicate the "+
				"event schema in two places and answer invalid bodies with a different error shape."),
		nag("AwsSolutions-APIG3",
			"No WAF web ACL: it costs a fixed monthly fee plus per-request charges. Callers must sign requests "+
				"with SigV4 (IAM), and stage throttling bounds the request rate. Add a web ACL if the API is exposed "+
				"to untrusted networks at volume."),
		nag("AwsSolutions-APIG6",
			"Execution logging needs the account-wide API Gateway CloudWatch Logs role (AWS::ApiGateway::Account), "+
				"which one stack must not own because it changes every API in the account/region. The stage has JSON "+
				"access logs and CloudWatch metrics, and the api function logs every request as JSON."),
	)
	if publicAPI {
		suppress(s.API, true,
			nag("AwsSolutions-APIG4",
				"Opt-in demo mode (-c publicApi=true): the methods are deliberately open. The default deployment "+
					"requires SigV4 (AuthorizationType AWS_IAM) on every method."),
			nag("AwsSolutions-COG4",
				"Opt-in demo mode (-c publicApi=true): no authoriser at all, see AwsSolutions-APIG4."),
		)
	} else {
		suppress(s.API, true,
			nag("AwsSolutions-COG4",
				"Methods use IAM authorisation (SigV4) instead of a Cognito user pool: the callers are services "+
					"and operators with AWS credentials, not end users with a sign-in."),
		)
	}

	// --- Functions ---------------------------------------------------------------------------
	const vpcReason = "ec2:CreateNetworkInterface/DescribeNetworkInterfaces/DescribeSubnets/DeleteNetworkInterface/" +
		"AssignPrivateIpAddresses/UnassignPrivateIpAddresses for the Lambda VPC attachment; these EC2 " +
		"actions do not support resource-level permissions (the same statement as the AWS managed " +
		"policy AWSLambdaVPCAccessExecutionRole)."
	const xrayReason = "xray:PutTraceSegments/PutTelemetryRecords for X-Ray active tracing, added by CDK with " +
		"Tracing ACTIVE; X-Ray does not support resource-level permissions for them (the same statement as " +
		"the AWS managed policy AWSXRayDaemonWriteAccess)."
	traced := map[awslambda.Function]bool{s.Functions.API: true, s.Functions.Processor: true, s.Counters.Function: true}
	for _, fn := range []awslambda.Function{s.Functions.API, s.Functions.Processor, s.Functions.Sweeper, s.Functions.Migrate, s.Counters.Function} {
		var reasons []string
		if s.Network != nil {
			reasons = append(reasons, vpcReason)
		}
		if traced[fn] {
			reasons = append(reasons, xrayReason)
		}
		if len(reasons) > 0 {
			suppress(fn.Role(), true, nagFor("AwsSolutions-IAM5", "Resource::*",
				strings.Join(reasons, " ")+" Every other grant of this role is scoped to one resource."))
		}
	}

	// --- Alarm topic -------------------------------------------------------------------------
	suppress(s.Notifications.Topic, true,
		nag("AwsSolutions-SNS2",
			"No server-side encryption: CloudWatch alarms cannot publish to a topic encrypted with the AWS managed "+
				"key (aws/sns), and a customer managed key costs $1 a month or more to protect notifications that hold "+
				"an alarm's name, metric and state, nothing else. Publishing requires TLS (AwsSolutions-SNS3) and "+
				"only this account's CloudWatch alarms may publish."),
	)

	// --- Webhooks ----------------------------------------------------------------------------
	suppress(s.Webhooks.Secret, true,
		nag("AwsSolutions-SMG4",
			"The webhook signing secret is shared with every receiver, which must be given the new value before "+
				"deliveries are signed with it: an automatic rotation would break every receiver's verification at "+
				"once. It is rotated by an operator, in step with the receivers (docs/deploy.md, \"Webhook delivery\")."),
	)

	// --- Database ----------------------------------------------------------------------------
	if db := s.Database; db != nil {
		suppress(db.Cluster, true,
			nag("AwsSolutions-SMG4",
				"The admin secret is read only by RDS Proxy; functions authenticate to the proxy with IAM tokens and "+
					"never see it. Rotation would need a rotation function in the VPC plus a Secrets Manager interface "+
					"endpoint (a fixed hourly cost) for a password no person or function uses directly."),
			nag("AwsSolutions-RDS10",
				"Deletion protection off so that `make destroy` works for this project; the removal policy SNAPSHOT keeps "+
					"a final snapshot of the data on stack deletion. Turn it on for a production account."),
			nag("AwsSolutions-RDS11",
				"Default port 3306: RDS Proxy for MySQL listens on 3306 whatever the cluster port, and the cluster accepts "+
					"connections only from the proxy's security group in isolated subnets, so a different port hides nothing."),
			nag("AwsSolutions-RDS14",
				"No Backtrack: it rewinds the whole cluster in place, undoing committed work for every event, and is billed "+
					"per change record. Recovery uses point-in-time restore from the 7-day automated backups."),
		)
	}

	// CDK's own singleton that sets the retention of the RDS log groups (error, slowquery).
	for _, child := range *awscdk.Stack_Of(s.Construct).Node().Children() {
		if strings.HasPrefix(*child.Node().Id(), "LogRetention") {
			suppress(child, true,
				nagFor("AwsSolutions-IAM4", "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
					"CDK-internal function (LogRetention) that sets the retention of the log groups RDS creates for "+
						"exported database logs; it only writes its own logs."),
				nagFor("AwsSolutions-IAM5", "Resource::*",
					"CDK-internal LogRetention function: logs:PutRetentionPolicy/DeleteRetentionPolicy on log groups "+
						"whose names RDS chooses at deploy time, so they cannot be named in the policy."),
			)
		}
	}
}

func nag(id, reason string) *cdknag.NagPackSuppression {
	return &cdknag.NagPackSuppression{Id: jsii.String(id), Reason: jsii.String(reason)}
}

func nagFor(id, appliesTo, reason string) *cdknag.NagPackSuppression {
	return &cdknag.NagPackSuppression{Id: jsii.String(id), Reason: jsii.String(reason), AppliesTo: &[]interface{}{appliesTo}}
}

func suppress(c constructs.IConstruct, children bool, s ...*cdknag.NagPackSuppression) {
	cdknag.NagSuppressions_AddResourceSuppressions(c, &s, jsii.Bool(children))
}
