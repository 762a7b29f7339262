package main

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of network.go: the VPC, its flow log and the SQS interface endpoint. The endpoint's policy is
// written in stack.go and tested in stack_test.go.

func TestNetworkIsPrivateWithoutNAT(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	check(t, "one VPC", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::VPC"), jsii.Number(1)) })
	check(t, "no NAT gateway", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0)) })
	check(t, "no internet gateway", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::InternetGateway"), jsii.Number(0)) })
	check(t, "no Elastic IP", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::EIP"), jsii.Number(0)) })
	// Two subnet groups (functions, database) in two AZs, none assigning public IPs.
	check(t, "four subnets", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::Subnet"), jsii.Number(4)) })
	check(t, "no public IPs", func() {
		tpl.AllResourcesProperties(jsii.String("AWS::EC2::Subnet"), obj(map[string]any{"MapPublicIpOnLaunch": false}))
	})
	check(t, "no route to the internet", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::Route"), jsii.Number(0)) })
}

func TestSQSEndpoint(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	// Exactly one endpoint, so the property check below is about that one.
	check(t, "two VPC endpoints (SNS: counters_test.go)", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::VPCEndpoint"), jsii.Number(2)) })
	check(t, "SQS interface endpoint with private DNS, in the functions' subnets", func() {
		tpl.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), obj(map[string]any{
			"VpcEndpointType":   "Interface",
			"PrivateDnsEnabled": true,
			// com.amazonaws.<region>.sqs
			"ServiceName": map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(arr(".sqs"))}},
			"SubnetIds":   assertions.Match_ArrayWith(arr(s.subnetRefs(t, s.stack.Network.FunctionSubnets())...)),
		}))
	})
}

func TestFlowLog(t *testing.T) {
	s := synth(t, variantAWS)
	check(t, "flow log of rejected traffic", func() {
		s.template.HasResourceProperties(jsii.String("AWS::EC2::FlowLog"), obj(map[string]any{
			"ResourceId":  refTo(s.ref(t, s.stack.Network.Vpc.VpcId())),
			"TrafficType": "REJECT",
		}))
	})
}
