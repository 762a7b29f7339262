package infra

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/jsii-runtime-go"
)

// Tests of network.go: the VPC, its way out (the NAT gateways), its flow log and the SQS interface endpoint. The endpoint's policy is
// written in stack.go and tested in stack_test.go.

// TestNetworkEgress: one way out of the VPC, the NAT gateway's, and only from the delivery subnets
// (processor, sweeper). The database's and the other functions' subnets have no route at all.
func TestNetworkEgress(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	n := s.stack.Network
	check(t, "one VPC", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::VPC"), jsii.Number(1)) })
	check(t, "the default number of NAT gateways", func() {
		tpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(defaultNatGateways))
	})
	check(t, "one Elastic IP per NAT gateway, nothing else with a public address", func() {
		tpl.ResourceCountIs(jsii.String("AWS::EC2::EIP"), jsii.Number(defaultNatGateways))
	})
	check(t, "one internet gateway, for the NAT gateways", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::InternetGateway"), jsii.Number(1)) })
	check(t, "no IPv6: no egress-only internet gateway", func() {
		tpl.ResourceCountIs(jsii.String("AWS::EC2::EgressOnlyInternetGateway"), jsii.Number(0))
	})
	// Four subnet groups (functions, database, delivery, public) in two AZs, none assigning public IPs.
	check(t, "eight subnets", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::Subnet"), jsii.Number(8)) })
	check(t, "no public IPs on launch, not even in the public subnets", func() {
		tpl.AllResourcesProperties(jsii.String("AWS::EC2::Subnet"), obj(map[string]any{"MapPublicIpOnLaunch": false}))
	})
	// The subnets that existed before delivery needed a way out keep their blocks: a changed CIDR would
	// replace the subnet, and with it the database's subnet group, on the upgrade of a deployed stack.
	for _, g := range []struct {
		name  string
		sel   *awsec2.SubnetSelection
		cidrs []string
	}{
		{functionsSubnets, n.FunctionSubnets(), []string{"10.0.0.0/24", "10.0.1.0/24"}},
		{databaseSubnets, n.DatabaseSubnets(), []string{"10.0.2.0/24", "10.0.3.0/24"}},
	} {
		for i, ref := range s.subnetRefs(t, g.sel) {
			check(t, g.name+" subnet keeps "+g.cidrs[i], func() {
				s.only(t, ref.(map[string]any)["Ref"].(string)).HasResourceProperties(jsii.String("AWS::EC2::Subnet"),
					obj(map[string]any{"CidrBlock": g.cidrs[i]}))
			})
		}
	}

	s.checkDeliverySourceIps(t, defaultNatGateways)

	routes := s.routesByTable(t)
	total := 0
	for _, rs := range routes {
		total += len(rs)
	}
	natInSubnet := s.natGatewaysBySubnet(t)
	publicSubnets := *n.Vpc.SelectSubnets(n.PublicSubnets()).Subnets
	igwID := s.ref(t, n.Vpc.(awsec2.Vpc).InternetGatewayId())

	for _, g := range []struct {
		name string
		sel  *awsec2.SubnetSelection
	}{{"database", n.DatabaseSubnets()}, {"functions (api, migrate, counter)", n.FunctionSubnets()}} {
		for _, sub := range *n.Vpc.SelectSubnets(g.sel).Subnets {
			if rs := routes[s.ref(t, sub.RouteTable().RouteTableId())]; len(rs) != 0 {
				t.Errorf("%s subnet %s has routes %s; it must have no way out of the VPC", g.name, *sub.Node().Path(), mustJSON(rs))
			}
		}
	}
	// Each delivery subnet: one route, the default one, to a NAT gateway in a public subnet (with one
	// NAT gateway, the first AZ's).
	for _, sub := range *n.Vpc.SelectSubnets(n.DeliverySubnets()).Subnets {
		rs := routes[s.ref(t, sub.RouteTable().RouteTableId())]
		if len(rs) != 1 || rs[0]["DestinationCidrBlock"] != "0.0.0.0/0" {
			t.Errorf("delivery subnet %s: routes %s, want the one default route", *sub.Node().Path(), mustJSON(rs))
			continue
		}
		nat, _ := rs[0]["NatGatewayId"].(map[string]any)
		natID, _ := nat["Ref"].(string)
		want := s.ref(t, publicSubnets[0].SubnetId())
		if natInSubnet[natID] != want {
			t.Errorf("delivery subnet %s routes to %s, want the NAT gateway in %s", *sub.Node().Path(), mustJSON(rs[0]), want)
		}
	}
	// Each public subnet: the default route to the internet gateway, nothing else.
	for _, sub := range publicSubnets {
		rs := routes[s.ref(t, sub.RouteTable().RouteTableId())]
		if len(rs) != 1 || rs[0]["DestinationCidrBlock"] != "0.0.0.0/0" || mustJSON(rs[0]["GatewayId"]) != mustJSON(refTo(igwID)) {
			t.Errorf("public subnet %s: routes %s, want the one default route to the internet gateway", *sub.Node().Path(), mustJSON(rs))
		}
	}
	if want := 2 + 2; total != want {
		t.Errorf("%d routes in the template, want %d (the delivery subnets' and the public subnets' default routes)", total, want)
	}
}

// TestTwoNATGateways: with natGateways=2, one NAT gateway per AZ, and each delivery subnet routes to
// the one in its own AZ (no cross-AZ hop, no shared failure).
func TestTwoNATGateways(t *testing.T) {
	s := synth(t, variantTwoNATs)
	n := s.stack.Network
	check(t, "two NAT gateways, two Elastic IPs", func() {
		s.template.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(2))
		s.template.ResourceCountIs(jsii.String("AWS::EC2::EIP"), jsii.Number(2))
	})
	s.checkDeliverySourceIps(t, 2)
	routes := s.routesByTable(t)
	natInSubnet := s.natGatewaysBySubnet(t)
	publicSubnets := *n.Vpc.SelectSubnets(n.PublicSubnets()).Subnets
	for i, sub := range *n.Vpc.SelectSubnets(n.DeliverySubnets()).Subnets {
		rs := routes[s.ref(t, sub.RouteTable().RouteTableId())]
		if len(rs) != 1 {
			t.Errorf("delivery subnet %d: routes %s, want one", i, mustJSON(rs))
			continue
		}
		nat, _ := rs[0]["NatGatewayId"].(map[string]any)
		natID, _ := nat["Ref"].(string)
		if got, want := natInSubnet[natID], s.ref(t, publicSubnets[i].SubnetId()); got != want {
			t.Errorf("delivery subnet %d routes to the NAT gateway in %q, want the one in its AZ's public subnet %q", i, got, want)
		}
		// Both are Fn::Select of Fn::GetAZs: the same resolved token is the same AZ.
		if got, want := mustJSON(s.stack.Resolve(sub.AvailabilityZone())), mustJSON(s.stack.Resolve(publicSubnets[i].AvailabilityZone())); got != want {
			t.Errorf("delivery subnet %d is in %s, its NAT gateway's subnet in %s", i, got, want)
		}
	}
}

// checkDeliverySourceIps: the output DeliverySourceIps lists the addresses of the n Elastic IPs
// (Ref of an EIP is its address), the NAT gateways' and the only ones of the stack.
func (s *synthesized) checkDeliverySourceIps(t *testing.T, n int) {
	t.Helper()
	var addresses []any
	for _, sub := range *s.stack.Network.Vpc.SelectSubnets(s.stack.Network.PublicSubnets()).Subnets {
		for id, raw := range s.resources() {
			r := raw.(map[string]any)
			if r["Type"] != "AWS::EC2::NatGateway" || mustJSON(r["Properties"].(map[string]any)["SubnetId"]) != mustJSON(refTo(s.ref(t, sub.SubnetId()))) {
				continue
			}
			alloc, _ := r["Properties"].(map[string]any)["AllocationId"].(map[string]any)["Fn::GetAtt"].([]any)
			if len(alloc) != 2 {
				t.Fatalf("NAT gateway %s: AllocationId %v, want the GetAtt of an EIP", id, r["Properties"])
			}
			addresses = append(addresses, refTo(alloc[0].(string)))
		}
	}
	if len(addresses) != n {
		t.Fatalf("%d NAT gateways with an Elastic IP in the public subnets, want %d", len(addresses), n)
	}
	var want any = map[string]any{"Fn::Join": []any{",", addresses}}
	if n == 1 {
		want = addresses[0] // CDK writes a join of one as the one
	}
	check(t, "output DeliverySourceIps: the NAT gateways' addresses", func() {
		s.template.HasOutput(jsii.String("DeliverySourceIps"), obj(map[string]any{"Value": want}))
	})
}

// routesByTable returns the properties of every AWS::EC2::Route, by the logical ID of its route table.
func (s *synthesized) routesByTable(t *testing.T) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for _, raw := range s.resources() {
		r := raw.(map[string]any)
		if r["Type"] != "AWS::EC2::Route" {
			continue
		}
		props := r["Properties"].(map[string]any)
		rt, _ := props["RouteTableId"].(map[string]any)
		id, ok := rt["Ref"].(string)
		if !ok {
			t.Fatalf("route with route table %v, want a Ref", props["RouteTableId"])
		}
		out[id] = append(out[id], props)
	}
	return out
}

// natGatewaysBySubnet maps the logical ID of each NAT gateway to that of its subnet.
func (s *synthesized) natGatewaysBySubnet(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for id, raw := range s.resources() {
		r := raw.(map[string]any)
		if r["Type"] != "AWS::EC2::NatGateway" {
			continue
		}
		sub, _ := r["Properties"].(map[string]any)["SubnetId"].(map[string]any)
		out[id], _ = sub["Ref"].(string)
	}
	return out
}

func TestSQSEndpoint(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	// Exactly one endpoint, so the property check below is about that one.
	check(t, "three VPC endpoints (SNS: counters_test.go; S3: history_test.go)", func() {
		tpl.ResourceCountIs(jsii.String("AWS::EC2::VPCEndpoint"), jsii.Number(3))
	})
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
