package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Notifications is the topic every alarm of the stack reports to, on ALARM and on OK: an operator
// subscribes to it (email, chat, on-call tool). docs/deploy.md, "Alarms".
type Notifications struct {
	constructs.Construct
	Topic awssns.ITopic
}

// NewNotifications creates the alarm topic, with an email subscription when email is not empty
// (context alarmEmail: an address is not a secret, and nothing else about the topic is either).
//
// The topic is not encrypted at rest: CloudWatch alarms cannot publish to a topic encrypted with the
// AWS managed key (aws/sns), whose key policy the account cannot change, and a customer managed key
// costs $1 a month (more with rotation) to protect messages that hold an alarm's name, its metric
// and its state. nag.go records the finding with that reason. Publishing requires TLS, and only
// CloudWatch alarms of this account may publish.
func NewNotifications(scope constructs.Construct, id string, email string) *Notifications {
	return NewNotificationsTo(scope, id, nil, email)
}

// NewNotificationsTo is NewNotifications to an existing topic, a user's (ExactlyOnceProps.AlarmTopic);
// nil: a topic of its own. The user's topic must let CloudWatch alarms of the account publish (its
// policy is its owner's); email, when set, is subscribed to it.
func NewNotificationsTo(scope constructs.Construct, id string, existing awssns.ITopic, email string) *Notifications {
	c := constructs.NewConstruct(scope, &id)
	stack := awscdk.Stack_Of(c)
	if existing != nil {
		if email != "" {
			existing.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(email), nil))
		}
		return &Notifications{Construct: c, Topic: existing}
	}
	topic := awssns.NewTopic(c, jsii.String("Topic"), &awssns.TopicProps{
		TopicName:   jsii.String(*stack.StackName() + "-alarms"),
		DisplayName: jsii.String(*stack.StackName() + " alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	// The topic policy CDK writes for EnforceSSL replaces SNS's default one, so CloudWatch's right to
	// publish is stated: the service, for alarms of this account and region only.
	topic.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsOfThisAccount"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  jsii.Strings(*topic.TopicArn()),
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"aws:SourceAccount": stack.Account()},
			"ArnLike": map[string]any{"aws:SourceArn": stack.FormatArn(&awscdk.ArnComponents{
				Service: jsii.String("cloudwatch"), Resource: jsii.String("alarm"), ResourceName: jsii.String("*"),
				ArnFormat: awscdk.ArnFormat_COLON_RESOURCE_NAME,
			})},
		},
	}))
	if email != "" {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(email), nil))
	}
	awscdk.NewCfnOutput(stack, jsii.String("AlarmTopicArn"), &awscdk.CfnOutputProps{
		Description: jsii.String("SNS topic every alarm notifies (ALARM and OK): subscribe to it (docs/runbook.md)"),
		Value:       topic.TopicArn(),
	})
	return &Notifications{Construct: c, Topic: topic}
}

// Notify makes each alarm report to the topic when it goes into ALARM and when it returns to OK.
func (n *Notifications) Notify(alarms ...awscloudwatch.Alarm) {
	action := awscloudwatchactions.NewSnsAction(n.Topic)
	for _, a := range alarms {
		a.AddAlarmAction(action)
		a.AddOkAction(action)
	}
}
