package infra

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Tests of functions.go: the four functions, their roles, log groups and security groups, and the
// processor's SQS mapping.
//
// The template holds six AWS::Lambda::Function resources (the four, plus CDK's trigger provider and
// log retention functions). Every check of one function runs on s.only(its logical ID), the ID
// resolved from the function's construct, so it cannot pass because another function matches.

type fnExpect struct {
	name       string
	fn         func(*Functions) awslambda.Function
	timeout    float64
	maxConns   int
	migrate    bool // applies the schema: DB_MIGRATE left at its default
	dbUser     string
	queueURL   bool // gets QUEUE_URL
	sqsNetwork bool // may reach the SQS endpoint
	delivers   bool // POSTs webhooks: in the delivery subnets, 443 and 80 out (webhooks_test.go)
}

var fnExpectations = []fnExpect{
	{"api", func(f *Functions) awslambda.Function { return f.API }, apiTimeout.Seconds(), apiMaxOpenConns, false, databaseAPIUser, true, true, false},
	{"processor", func(f *Functions) awslambda.Function { return f.Processor }, processorTimeout.Seconds(), processorMaxOpenConns, false, databaseProcessorUser, false, true, true},
	{"sweeper", func(f *Functions) awslambda.Function { return f.Sweeper }, sweeperTimeout.Seconds(), sweeperMaxOpenConns, false, databaseSweeperUser, false, false, true},
	{"migrate", func(f *Functions) awslambda.Function { return f.Migrate }, migrateTimeout.Seconds(), migrateMaxOpenConns, true, databaseAdminUsername, false, false, false},
}

// What migrate is told to create: each function's own user, by role (internal/mysql's roles).
const wantFunctionUsers = "api:" + databaseAPIUser + ",processor:" + databaseProcessorUser + ",sweeper:" + databaseSweeperUser +
	",counter:" + databaseCounterUser

func TestFunctions(t *testing.T) {
	s := synth(t, variantAWS)
	proxyID := s.ref(t, s.stack.Database.Proxy.DbProxyName())
	queueID := s.ref(t, s.stack.Queues.Main.QueueUrl())
	fnSubnets := s.subnetRefs(t, s.stack.Network.FunctionSubnets())
	deliverySubnets := s.subnetRefs(t, s.stack.Network.DeliverySubnets())
	for _, e := range fnExpectations {
		t.Run(e.name, func(t *testing.T) {
			fn := e.fn(s.stack.Functions)
			one := s.only(t, s.ref(t, fn.FunctionName()))
			if e.timeout*1000 > 15*60*1000 {
				t.Errorf("timeout over the Lambda maximum")
			}

			env := map[string]any{
				"DB_HOST":           getAtt(proxyID, "Endpoint"),
				"DB_PORT":           "3306",
				"DB_NAME":           databaseName,
				"DB_USER":           e.dbUser,
				"DB_IAM_AUTH":       "true",
				"DB_MAX_OPEN_CONNS": fmt.Sprint(e.maxConns),
				"DB_DSN":            assertions.Match_Absent(), // only in the LocalStack variant
				"DB_PASSWORD":       assertions.Match_Absent(), // functions use IAM auth
				// Only migrate applies the schema; the others are told not to.
				"DB_MIGRATE": "false",
				"QUEUE_URL":  assertions.Match_Absent(),
				// Only migrate creates the database users.
				"DB_FUNCTION_USERS": assertions.Match_Absent(),
			}
			if e.migrate {
				env["DB_MIGRATE"] = assertions.Match_Absent()
				env["DB_FUNCTION_USERS"] = wantFunctionUsers
			}
			if e.queueURL {
				env["QUEUE_URL"] = refTo(queueID)
			}
			subnets := fnSubnets
			if e.delivers {
				subnets = deliverySubnets
			}
			logGroup := assertions.NewCapture(nil)
			must(t, "runtime, architecture, handler, timeout, memory, code asset, JSON logs, environment, subnets", func() {
				one.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
					"FunctionName":  assertions.Match_Absent(),
					"Runtime":       "provided.al2023",
					"Architectures": []any{"arm64"},
					"Handler":       "bootstrap",
					"Timeout":       e.timeout,
					"MemorySize":    functionMemoryMB,
					// Code comes from an asset (the function's folder), uploaded to S3.
					"Code": assertions.Match_ObjectLike(obj(map[string]any{"S3Key": assertions.Match_AnyValue()})),
					// Structured logs into its own log group (retention checked below).
					"LoggingConfig": map[string]any{"LogFormat": "JSON", "LogGroup": map[string]any{"Ref": logGroup}},
					"Environment":   map[string]any{"Variables": assertions.Match_ObjectLike(&env)},
					// In the functions' isolated subnets, or the delivery subnets for those that deliver
					// webhooks, and no others (its security group: checkFunctionEgress).
					"VpcConfig": assertions.Match_ObjectLike(obj(map[string]any{
						"SubnetIds": subnets,
					})),
				}))
			})
			check(t, "log group with one-month retention", func() {
				s.only(t, *logGroup.AsString()).HasResourceProperties(jsii.String("AWS::Logs::LogGroup"), obj(map[string]any{
					"RetentionInDays": logRetentionDays,
				}))
			})
			s.checkFunctionEgress(t, fn, e)
		})
	}
}

// No function but migrate connects to the database as the cluster's admin user: every other
// function of the template (CDK's own helpers included) either has no DB_USER or a user of its own,
// and no two functions share one.
func TestOnlyMigrateConnectsAsTheAdmin(t *testing.T) {
	s := synth(t, variantAWS)
	migrateID := s.ref(t, s.stack.Functions.Migrate.FunctionName())
	users := map[string]string{} // DB_USER -> function
	for id, raw := range s.resources() {
		r := raw.(map[string]any)
		if r["Type"] != "AWS::Lambda::Function" {
			continue
		}
		props, _ := r["Properties"].(map[string]any)
		env, _ := props["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		user, ok := vars["DB_USER"].(string)
		if !ok {
			if _, set := vars["DB_USER"]; set {
				t.Errorf("function %s: DB_USER is not a literal: %v", id, vars["DB_USER"])
			}
			continue
		}
		if user == databaseAdminUsername && id != migrateID {
			t.Errorf("function %s connects as the admin user %q; only migrate may", id, user)
		}
		if other, dup := users[user]; dup {
			t.Errorf("functions %s and %s share the database user %q", other, id, user)
		}
		users[user] = id
	}
	if users[databaseAdminUsername] != migrateID {
		t.Errorf("migrate does not connect as the admin user (DB_USER per function: %v)", users)
	}
	if len(users) != len(FunctionNames) {
		t.Errorf("%d functions with a database user, want %d: %v", len(users), len(FunctionNames), users)
	}
}

// checkFunctionEgress: 443 and 80 to any IPv4 address for the delivering functions (processor,
// sweeper), no egress to the internet for the others; 3306 to the proxy; 443 to the SQS endpoint for
// the api (SendMessage) and the processor (ChangeMessageVisibility) only; no other egress rule.
func (s *synthesized) checkFunctionEgress(t *testing.T, fn awslambda.Function, e fnExpect) {
	t.Helper()
	sgID := s.getAttID(t, (*fn.Connections().SecurityGroups())[0].SecurityGroupId())
	internet := s.internetEgress(t, sgID) // webhooks_test.go
	if e.delivers {
		if want := []string{"tcp 0.0.0.0/0 443-443", "tcp 0.0.0.0/0 80-80"}; mustJSON(internet) != mustJSON(want) {
			t.Errorf("%s: egress to the internet %v, want %v (webhook deliveries and Secrets Manager)", e.name, internet, want)
		}
	} else if e.name == "api" {
		// The history's reader: 443 to S3's addresses, which only the gateway endpoint routes (history_test.go).
		if want := []string{"tcp 0.0.0.0/0 443-443"}; mustJSON(internet) != mustJSON(want) {
			t.Errorf("%s: egress to the internet %v, want %v (the history bucket, through its endpoint)", e.name, internet, want)
		}
	} else if len(internet) != 0 {
		t.Errorf("%s: egress to the internet %v, want none", e.name, internet)
	}

	// The standalone egress rules of this security group, all of them and by destination.
	rules := func(match map[string]any) int {
		match["GroupId"] = getAtt(sgID, "GroupId")
		return len(*s.template.FindResources(jsii.String("AWS::EC2::SecurityGroupEgress"), obj(map[string]any{
			"Properties": assertions.Match_ObjectLike(&match),
		})))
	}
	proxySG := s.getAttID(t, (*s.stack.Database.Proxy.Connections().SecurityGroups())[0].SecurityGroupId())
	endpointSG := s.getAttID(t, (*s.stack.Network.SqsEndpoint.Connections().SecurityGroups())[0].SecurityGroupId())
	all := rules(map[string]any{})
	toProxy := rules(map[string]any{
		"DestinationSecurityGroupId": getAtt(proxySG, "GroupId"),
		"FromPort":                   databasePort,
		"ToPort":                     databasePort,
	})
	toEndpoint := rules(map[string]any{
		"DestinationSecurityGroupId": getAtt(endpointSG, "GroupId"),
		"FromPort":                   443,
		"ToPort":                     443,
	})
	if toProxy == 0 {
		t.Errorf("%s cannot reach the proxy on %d", e.name, databasePort)
	}
	if (toEndpoint > 0) != e.sqsNetwork {
		t.Errorf("%s egress to the SQS endpoint = %v, want %v", e.name, toEndpoint > 0, e.sqsNetwork)
	}
	if other := all - toProxy - toEndpoint - s.snsEgress(t, sgID); other != 0 { // snsEgress: counters_test.go
		t.Errorf("%s has %d egress rules besides the proxy and the SQS endpoint", e.name, other)
	}
}

func TestLeastPrivilege(t *testing.T) {
	s := synth(t, variantAWS)
	tpl := s.template
	f := s.stack.Functions
	mainID := s.ref(t, s.stack.Queues.Main.QueueUrl())
	dlqID := s.ref(t, s.stack.Queues.DeadLetter.QueueUrl())
	proxyID := s.ref(t, s.stack.Database.Proxy.DbProxyName())
	roleID := func(fn awslambda.Function) string { return s.ref(t, fn.Role().RoleName()) }

	// What each function must be granted, each on a policy attached to that function's role.
	mainArn := getAtt(mainID, "Arn")
	for _, g := range []struct {
		what   string
		fn     awslambda.Function
		action string
	}{
		{"api can sqs:SendMessage to the main queue", f.API, "sqs:SendMessage"},
		{"processor can sqs:ReceiveMessage from the main queue", f.Processor, "sqs:ReceiveMessage"},
		{"processor can sqs:DeleteMessage on the main queue", f.Processor, "sqs:DeleteMessage"},
		{"processor can extend visibility on the main queue", f.Processor, "sqs:ChangeMessageVisibility"},
	} {
		check(t, g.what, func() {
			tpl.HasResourceProperties(jsii.String("AWS::IAM::Policy"), grant(roleID(g.fn), assertions.Match_ArrayWith(arr(g.action)), mainArn))
		})
	}
	// arn:<partition>:rds-db:<region>:<account>:dbuser:<proxy resource ID>/<user>
	proxyUser := func(user string) map[string]any {
		return map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(arr(
			":dbuser:",
			map[string]any{"Fn::Select": []any{6, map[string]any{"Fn::Split": []any{":", getAtt(proxyID, "DBProxyArn")}}}},
			"/"+user,
		))}}
	}
	functions := map[string]awslambda.Function{"api": f.API, "processor": f.Processor, "sweeper": f.Sweeper, "migrate": f.Migrate}
	dbUsers := map[string]string{"api": databaseAPIUser, "processor": databaseProcessorUser, "sweeper": databaseSweeperUser, "migrate": databaseAdminUsername}
	for name, fn := range functions {
		user := dbUsers[name]
		check(t, name+" can rds-db:connect to the proxy as "+user, func() {
			tpl.HasResourceProperties(jsii.String("AWS::IAM::Policy"), grant(roleID(fn), "rds-db:connect", proxyUser(user)))
		})
		// ... and as no other user: every rds-db:connect it has names its own user, never a wildcard.
		for _, st := range s.policiesOfRole(t, roleID(fn)) {
			if st.Effect != "Allow" || !hasAction(st.Actions, "rds-db:connect") {
				continue
			}
			for _, r := range st.Resources {
				if j := mustJSON(r); !strings.Contains(j, `"/`+user+`"`) {
					t.Errorf("%s may rds-db:connect to %s; only as its own user %q", name, j, user)
				}
			}
		}
		// No managed policies (AWSLambdaBasicExecutionRole would allow logs on every log group).
		check(t, "role of "+name+" has no managed policies", func() {
			s.only(t, roleID(fn)).HasResourceProperties(jsii.String("AWS::IAM::Role"), obj(map[string]any{
				"ManagedPolicyArns": assertions.Match_Absent(),
			}))
		})
	}

	// What no function may do. These stay on the normalised statements of helpers_test.go: a
	// matcher that finds no statement of one literal shape would not see sqs:* or an Action
	// written as a string.
	api, processor, sweeper, migrate := s.policiesOfRole(t, roleID(f.API)), s.policiesOfRole(t, roleID(f.Processor)),
		s.policiesOfRole(t, roleID(f.Sweeper)), s.policiesOfRole(t, roleID(f.Migrate))
	if grantsAnywhere(api, "sqs:ReceiveMessage") || grantsAnywhere(api, "sqs:DeleteMessage") {
		t.Errorf("api may consume messages")
	}
	for name, st := range map[string][]statement{"processor": processor, "sweeper": sweeper, "migrate": migrate} {
		if grantsAnywhere(st, "sqs:SendMessage") {
			t.Errorf("%s may sqs:SendMessage; only the api sends", name)
		}
	}
	for name, st := range map[string][]statement{"sweeper": sweeper, "migrate": migrate} {
		if grantsAnywhere(st, "sqs:ReceiveMessage") {
			t.Errorf("%s may consume the queue", name)
		}
	}
	for name, st := range map[string][]statement{"api": api, "processor": processor, "sweeper": sweeper, "migrate": migrate} {
		// The database's secret is the proxy's alone; the webhook signing secret is the delivering
		// functions' (webhooks_test.go: TestWebhookSecretGrants).
		if allows(st, "secretsmanager:GetSecretValue", s.ref(t, s.stack.Database.Cluster.Secret().SecretArn())) {
			t.Errorf("%s may read the database secret; only the proxy may", name)
		}
		if allows(st, "sqs:SendMessage", dlqID) {
			t.Errorf("%s may write to the DLQ", name)
		}
		for _, stmt := range st {
			for _, r := range stmt.Resources {
				if r == "*" {
					for _, a := range stmt.Actions {
						// X-Ray's two write actions have no resource-level permissions: the traced
						// functions (api, processor) need them on *, the others not at all.
						xray := (a == "xray:PutTraceSegments" || a == "xray:PutTelemetryRecords") && (name == "api" || name == "processor")
						if !strings.HasPrefix(a, "ec2:") && !xray {
							t.Errorf("%s has %s on *; only the EC2 ENI actions of the VPC attachment, and X-Ray's writes of a traced function, may be unscoped", name, a)
						}
					}
				}
			}
		}
	}
}

func TestEventSourceMapping(t *testing.T) {
	s := synth(t, variantAWS)
	mainID := s.ref(t, s.stack.Queues.Main.QueueUrl())
	processorID := s.ref(t, s.stack.Functions.Processor.FunctionName())
	check(t, "two mappings (the counter's: counters_test.go)", func() { s.template.ResourceCountIs(jsii.String("AWS::Lambda::EventSourceMapping"), jsii.Number(2)) })
	concurrency := assertions.NewCapture(nil)
	window := assertions.NewCapture(nil)
	must(t, "processor consumes the main queue with per-message failures", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"EventSourceArn":                 getAtt(mainID, "Arn"),
			"FunctionName":                   refTo(processorID),
			"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
			"BatchSize":                      batchSize,
			"MaximumBatchingWindowInSeconds": window,
			"ScalingConfig":                  map[string]any{"MaximumConcurrency": concurrency},
		}))
	})
	if c := *concurrency.AsNumber(); c < 2 || c > 1000 {
		t.Errorf("MaximumConcurrency %v outside 2..1000", c)
	}
	if w := *window.AsNumber(); w <= 0 || w > 300 {
		t.Errorf("MaximumBatchingWindowInSeconds %v, want 1..300", w)
	}
}

// X-Ray active tracing on the functions a request or a message invokes, with the permission to
// write traces; not on the sweeper (the schedule invokes it every minute: traces at idle) nor on
// migrate (docs/deploy.md, "Tracing").
func TestTracing(t *testing.T) {
	s := synth(t, variantAWS)
	f := s.stack.Functions
	for _, c := range []struct {
		name   string
		fn     awslambda.Function
		traced bool
	}{{"api", f.API, true}, {"processor", f.Processor, true}, {"counter", s.stack.Counters.Function, true},
		{"sweeper", f.Sweeper, false}, {"migrate", f.Migrate, false}} {
		mode := assertions.Match_Absent()
		if c.traced {
			mode = assertions.Match_ObjectEquals(obj(map[string]any{"Mode": "Active"}))
		}
		check(t, c.name+" tracing", func() {
			s.only(t, s.ref(t, c.fn.FunctionName())).HasResourceProperties(jsii.String("AWS::Lambda::Function"),
				obj(map[string]any{"TracingConfig": mode}))
		})
		stmts := s.policiesOfRole(t, s.ref(t, c.fn.Role().RoleName()))
		for _, action := range []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"} {
			if got := allows(stmts, action, `"*"`); got != c.traced {
				t.Errorf("%s may %s: %v, want %v", c.name, action, got, c.traced)
			}
		}
	}
}
