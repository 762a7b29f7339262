package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Subnet groups. The database and the functions that only talk to AWS (api, migrate, counter) are in
// isolated subnets, with no route out of the VPC. The functions that deliver webhooks (processor,
// sweeper) are in the delivery subnets, whose default route goes to a NAT gateway in a public
// subnet. Nothing but the NAT gateways is placed in the public subnets.
const (
	functionsSubnets = "functions"
	databaseSubnets  = "database"
	deliverySubnets  = "delivery"
	publicSubnets    = "public"
)

// vpcMaxAzs is how many AZs the VPC spans, and so the most NAT gateways that make sense (one per AZ).
const vpcMaxAzs = 2

// Network is a VPC whose one way out is the NAT gateways of the delivery subnets: webhook deliveries
// (processor, sweeper) and their Secrets Manager read go through them. The database subnets and the
// other functions' subnets have no route out. The AWS APIs the functions call on the data path (SQS,
// SNS) are reached through interface endpoints. IAM database auth tokens are signed locally and need
// no STS call; CloudWatch Logs are shipped by the Lambda service, not from inside the VPC.
type Network struct {
	constructs.Construct
	Vpc         awsec2.IVpc
	SqsEndpoint awsec2.InterfaceVpcEndpoint
	// NatAddresses are the public IPv4 addresses of the NAT gateways (Ref of their Elastic IPs): the
	// source address of every delivery, which receivers may allow in their firewalls. Empty in a VPC
	// the construct did not create (NewNetworkIn): its owner knows them.
	NatAddresses []*string
	subnets      NetworkSubnets
}

// NetworkSubnets says where each part runs in a VPC: the functions that only talk to AWS (api,
// migrate, counter) and the interface endpoints, the database and its proxy, and the functions that
// deliver webhooks (processor, sweeper), which need a route out to the receivers (a NAT gateway).
type NetworkSubnets struct {
	Functions *awsec2.SubnetSelection
	Database  *awsec2.SubnetSelection
	Delivery  *awsec2.SubnetSelection
}

// NewNetwork creates the VPC with natGateways NAT gateways (1 or 2: one per AZ), its
// rejected-traffic flow log and the SQS interface endpoint.
func NewNetwork(scope constructs.Construct, id string, natGateways int) *Network {
	c := constructs.NewConstruct(scope, &id)
	vpc := awsec2.NewVpc(c, jsii.String("Vpc"), &awsec2.VpcProps{
		// Environment-agnostic stack: two AZs picked by Fn::GetAZs at deploy time, no lookup at synth.
		MaxAzs: jsii.Number(vpcMaxAzs),
		// With one, it sits in the first AZ and the other AZ's delivery subnet routes to it too.
		NatGateways:       jsii.Number(natGateways),
		NatGatewaySubnets: &awsec2.SubnetSelection{SubnetGroupName: jsii.String(publicSubnets)},
		// The new groups come last: CIDRs are handed out in this order, so the functions' and the
		// database's subnets keep the blocks they had before delivery needed a way out (no replacement).
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String(functionsSubnets), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
			{Name: jsii.String(databaseSubnets), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
			{Name: jsii.String(deliverySubnets), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(24)},
			// A NAT gateway needs one address; nothing launched here gets a public IP of its own.
			{Name: jsii.String(publicSubnets), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(28),
				MapPublicIpOnLaunch: jsii.Bool(false)},
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
	// CDK gives each NAT gateway's Elastic IP the ID "EIP" under its public subnet.
	var addresses []*string
	for _, sub := range *vpc.PublicSubnets() {
		if eip, ok := sub.Node().TryFindChild(jsii.String("EIP")).(awsec2.CfnEIP); ok {
			addresses = append(addresses, eip.Ref())
		}
	}
	return &Network{Construct: c, Vpc: vpc, SqsEndpoint: sqs, NatAddresses: addresses, subnets: NetworkSubnets{
		Functions: &awsec2.SubnetSelection{SubnetGroupName: jsii.String(functionsSubnets)},
		Database:  &awsec2.SubnetSelection{SubnetGroupName: jsii.String(databaseSubnets)},
		Delivery:  &awsec2.SubnetSelection{SubnetGroupName: jsii.String(deliverySubnets)},
	}}
}

// NewNetworkIn uses an existing VPC, a user's (ExactlyOnceProps.Vpc): the parts go in the subnets
// subnets selects (each required), and the SQS interface endpoint is added to it in the functions'
// subnets. The VPC's routes, NAT gateways and flow logs are its owner's: the delivery subnets must
// have a route out, the others need none.
func NewNetworkIn(scope constructs.Construct, id string, vpc awsec2.IVpc, subnets NetworkSubnets) *Network {
	c := constructs.NewConstruct(scope, &id)
	sqs := vpc.AddInterfaceEndpoint(jsii.String("SqsEndpoint"), &awsec2.InterfaceVpcEndpointOptions{
		Service:           awsec2.InterfaceVpcEndpointAwsService_SQS(),
		Subnets:           subnets.Functions,
		PrivateDnsEnabled: jsii.Bool(true),
		Open:              jsii.Bool(false),
	})
	return &Network{Construct: c, Vpc: vpc, SqsEndpoint: sqs, subnets: subnets}
}

// FunctionSubnets selects the isolated subnets of the functions that do not deliver webhooks (api,
// migrate, counter), and of the interface endpoints.
func (n *Network) FunctionSubnets() *awsec2.SubnetSelection { return n.subnets.Functions }

// DeliverySubnets selects the subnets of the functions that deliver webhooks (processor, sweeper):
// the only ones with a route out of the VPC, through the NAT gateways.
func (n *Network) DeliverySubnets() *awsec2.SubnetSelection { return n.subnets.Delivery }

// PublicSubnets selects the subnets of the NAT gateways.
func (n *Network) PublicSubnets() *awsec2.SubnetSelection {
	return &awsec2.SubnetSelection{SubnetGroupName: jsii.String(publicSubnets)}
}

// DatabaseSubnets selects the subnets of the Aurora cluster and the proxy.
func (n *Network) DatabaseSubnets() *awsec2.SubnetSelection { return n.subnets.Database }
