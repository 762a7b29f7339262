package infra

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/jsii-runtime-go"
)

// Tests of exactlyonce.go: the construct used as a library, by an app that is not infra/app.

// shopApp is someone else's CDK app: its own stack ("Shop"), its own VPC, signing secret and alarm
// topic, the construct under the id "Events" with database settings and sizing of its own, and the
// AwsSolutions checks run over the whole app, as README.md's example does.
type shopApp struct {
	stack  awscdk.Stack
	vpc    awsec2.Vpc
	secret awssecretsmanager.Secret
	topic  awssns.Topic
	events *ExactlyOnce
	tpl    assertions.Template
}

func newShopApp(t *testing.T) *shopApp {
	t.Helper()
	app := newApp(t, nil)
	stack := awscdk.NewStack(app, jsii.String("Shop"), nil)
	vpc := awsec2.NewVpc(stack, jsii.String("ShopVpc"), &awsec2.VpcProps{
		MaxAzs:      jsii.Number(2),
		NatGateways: jsii.Number(1),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String("app"), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(22)},
			{Name: jsii.String("data"), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
			{Name: jsii.String("edge"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(26), MapPublicIpOnLaunch: jsii.Bool(false)},
		},
	})
	vpc.AddFlowLog(jsii.String("Flow"), nil)
	secret := awssecretsmanager.NewSecret(stack, jsii.String("ShopSigningSecret"), &awssecretsmanager.SecretProps{
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{PasswordLength: jsii.Number(64), ExcludePunctuation: jsii.Bool(true)},
	})
	topic := awssns.NewTopic(stack, jsii.String("OpsTopic"), &awssns.TopicProps{EnforceSSL: jsii.Bool(true)})
	events := NewExactlyOnce(stack, "Events", ExactlyOnceProps{
		AssetDir: assetDir,
		Vpc:      vpc,
		Subnets: NetworkSubnets{
			Functions: &awsec2.SubnetSelection{SubnetGroupName: jsii.String("data")},
			Database:  &awsec2.SubnetSelection{SubnetGroupName: jsii.String("data")},
			Delivery:  &awsec2.SubnetSelection{SubnetGroupName: jsii.String("app")},
		},
		Database:      DatabaseSettings{MinCapacity: 1, MaxCapacity: 8, BackupRetentionDays: 14, DeletionProtection: true},
		WebhookSecret: secret,
		AlarmTopic:    topic,
		SweeperShards: 3,
		Retention:     RetentionSettings{Window: &shopWindow},
	})
	addNagChecks(app)
	app.Synth(nil)
	return &shopApp{stack: stack, vpc: vpc, secret: secret, topic: topic, events: events,
		tpl: assertions.Template_FromStack(stack, nil)}
}

func (a *shopApp) ref(t *testing.T, token *string) map[string]any {
	t.Helper()
	m, ok := a.stack.Resolve(token).(map[string]any)
	if !ok || m["Ref"] == nil {
		t.Fatalf("token resolves to %#v, want a Ref", a.stack.Resolve(token))
	}
	return m
}

func (a *shopApp) subnets(t *testing.T, group string) *[]any {
	var out []any
	for _, id := range *a.vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetGroupName: jsii.String(group)}).SubnetIds {
		out = append(out, a.ref(t, id))
	}
	return &out
}

// The construct in another app runs in the app's VPC and subnets, signs with the app's secret,
// alarms to the app's topic, and takes its database settings and sizing; it creates none of what it
// was given, and the AwsSolutions checks find nothing in the app.
// shopWindow is the other app's HISTORY_RETENTION.
var shopWindow = 6 * time.Hour

func TestTheConstructInAnotherApp(t *testing.T) {
	a := newShopApp(t)
	tpl := a.tpl

	check(t, "the sweeper archives pages after the app's window", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(obj(map[string]any{"HISTORY_RETENTION": "6h"}))},
		}))
	})

	check(t, "one VPC, the app's", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::VPC"), jsii.Number(1)) })
	check(t, "the processor and the sweeper deliver from the app's egress subnets", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"VpcConfig": assertions.Match_ObjectLike(obj(map[string]any{"SubnetIds": a.subnets(t, "app")})),
		}), jsii.Number(2))
	})
	check(t, "the api, migrate and the counter function run in the data subnets", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"VpcConfig": assertions.Match_ObjectLike(obj(map[string]any{"SubnetIds": a.subnets(t, "data")})),
		}), jsii.Number(3))
	})
	check(t, "the database and its proxy in the data subnets", func() {
		tpl.HasResourceProperties(jsii.String("AWS::RDS::DBSubnetGroup"), obj(map[string]any{"SubnetIds": a.subnets(t, "data")}))
		tpl.HasResourceProperties(jsii.String("AWS::RDS::DBProxy"), obj(map[string]any{"VpcSubnetIds": a.subnets(t, "data")}))
	})
	check(t, "the SQS and SNS interface endpoints and the S3 gateway endpoint (history.go) in the app's VPC", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
			"VpcId": a.ref(t, a.vpc.VpcId()),
		}), jsii.Number(3))
	})
	check(t, "the database settings", func() {
		tpl.HasResourceProperties(jsii.String("AWS::RDS::DBCluster"), obj(map[string]any{
			"ServerlessV2ScalingConfiguration": map[string]any{"MinCapacity": 1, "MaxCapacity": 8},
			"BackupRetentionPeriod":            14,
			"DeletionProtection":               true,
		}))
	})
	check(t, "the processor and the sweeper read the app's secret, and no signing secret is generated", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(obj(map[string]any{
				"WEBHOOK_SECRET_ARN": a.ref(t, a.secret.SecretArn())}))},
		}), jsii.Number(2))
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::SecretsManager::Secret"), obj(map[string]any{
			"Description": assertions.Match_StringLikeRegexp(jsii.String("Standard Webhooks")),
		}), jsii.Number(0))
	})
	check(t, "every alarm reports to the app's topic, and no alarm topic is created", func() {
		topic := a.ref(t, a.topic.TopicArn())
		n := len(*tpl.FindResources(jsii.String("AWS::CloudWatch::Alarm"), nil))
		if n == 0 {
			t.Fatal("no alarm")
		}
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"AlarmActions": []any{topic}, "OKActions": []any{topic},
		}), jsii.Number(float64(n)))
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::SNS::Topic"), obj(map[string]any{
			"TopicName": assertions.Match_StringLikeRegexp(jsii.String("-alarms$")),
		}), jsii.Number(0))
	})
	check(t, "three sweeper shards: three schedules", func() {
		tpl.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(3))
	})
	check(t, "the names derive from the app's stack", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), obj(map[string]any{"QueueName": "Shop-events"}))
	})

	pattern := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	ann := assertions.Annotations_FromStack(a.stack)
	for _, m := range *ann.FindError(jsii.String("*"), pattern) {
		t.Errorf("cdk-nag error at %s: %v", *m.Id, m.Entry.Data)
	}
	for _, m := range *ann.FindWarning(jsii.String("*"), pattern) {
		t.Errorf("cdk-nag warning at %s: %v", *m.Id, m.Entry.Data)
	}
}

// Props the construct cannot build are refused, naming the field.
func TestTheConstructRefusesBadProps(t *testing.T) {
	vpc := awsec2.Vpc_FromVpcAttributes(awscdk.NewStack(newApp(t, nil), jsii.String("S"), nil), jsii.String("V"),
		&awsec2.VpcAttributes{VpcId: jsii.String("vpc-1"), AvailabilityZones: jsii.Strings("a")})
	ok := ExactlyOnceProps{AssetDir: assetDir}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		props ExactlyOnceProps
		names string
	}{
		{ExactlyOnceProps{}, "AssetDir"},
		{ExactlyOnceProps{AssetDir: "x", LambdaArch: "mips"}, "LambdaArch"},
		{ExactlyOnceProps{AssetDir: "x", SweeperShards: 9}, "SweeperShards"},
		{ExactlyOnceProps{AssetDir: "x", NatGateways: 3}, "NatGateways"},
		{ExactlyOnceProps{AssetDir: "x", Vpc: vpc}, "Subnets"},
		{ExactlyOnceProps{AssetDir: "x", Vpc: vpc, External: &ExternalDatabase{DSN: "d"}}, "External"},
		{ExactlyOnceProps{AssetDir: "x", External: &ExternalDatabase{}}, "External.DSN"},
		{ExactlyOnceProps{AssetDir: "x", AlarmEmail: "not an address"}, "AlarmEmail"},
	} {
		err := c.props.Validate()
		if err == nil || !strings.Contains(err.Error(), c.names) {
			t.Errorf("%+v: got %v, want an error naming %s", c.props, err, c.names)
		}
	}
}
