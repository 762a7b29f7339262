package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Subnet group names: the functions and the database live in separate isolated subnets.
const (
	functionsSubnets = "functions"
	databaseSubnets  = "database"
)

// Network is a VPC with no route to the internet: isolated subnets only, no NAT gateway, no internet
// gateway. The one AWS API the functions call (SQS, from the api) is reached through an interface
// endpoint. IAM database auth tokens are signed locally and need no STS call; CloudWatch Logs are
// shipped by the Lambda service, not from inside the VPC.
type Network struct {
	constructs.Construct
	Vpc         awsec2.Vpc
	SqsEndpoint awsec2.InterfaceVpcEndpoint
}

// NewNetwork creates the VPC, its rejected-traffic flow log and the SQS interface endpoint.
func NewNetwork(scope constructs.Construct, id string) *Network {
	c := constructs.NewConstruct(scope, &id)
	vpc := awsec2.NewVpc(c, jsii.String("Vpc"), &awsec2.VpcProps{
		// Environment-agnostic stack: two AZs picked by Fn::GetAZs at deploy time, no lookup at synth.
		MaxAzs:      jsii.Number(2),
		NatGateways: jsii.Number(0),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String(functionsSubnets), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
			{Name: jsii.String(databaseSubnets), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
		},
		RestrictDefaultSecurityGroup: jsii.Bool(false),
	})

	// Rejected traffic only: cheap, and exactly what one needs when a security group is wrong.
	flowLogs := awslogs.NewLogGroup(c, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
		Retention:     logRetention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	vpc.AddFlowLog(jsii.String("RejectedTraffic"), &awsec2.FlowLogOptions{
		Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(flowLogs, nil),
		TrafficType: awsec2.FlowLogTrafficType_REJECT,
	})

	// Closed by default (Open=false): only security groups explicitly allowed (the api's) reach it.
	sqs := vpc.AddInterfaceEndpoint(jsii.String("SqsEndpoint"), &awsec2.InterfaceVpcEndpointOptions{
		Service:           awsec2.InterfaceVpcEndpointAwsService_SQS(),
		Subnets:           &awsec2.SubnetSelection{SubnetGroupName: jsii.String(functionsSubnets)},
		PrivateDnsEnabled: jsii.Bool(true),
		Open:              jsii.Bool(false),
	})
	return &Network{Construct: c, Vpc: vpc, SqsEndpoint: sqs}
}

// FunctionSubnets selects the subnets the Lambda functions run in.
func (n *Network) FunctionSubnets() *awsec2.SubnetSelection {
	return &awsec2.SubnetSelection{SubnetGroupName: jsii.String(functionsSubnets)}
}

// DatabaseSubnets selects the subnets of the Aurora cluster and the proxy.
func (n *Network) DatabaseSubnets() *awsec2.SubnetSelection {
	return &awsec2.SubnetSelection{SubnetGroupName: jsii.String(databaseSubnets)}
}
