package infra

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/jsii-runtime-go"
)

// The tests synthesise each variant of the app once and share it: a synthesis costs seconds of jsii
// round trips, and the tests only read the result.
//
// There is one test file per construct file (network_test.go for network.go, ...). Checks use the
// assertions library's matchers and captures. Resources are found by type and properties, or through
// the constructs of ExactlyOnceStack (their Ref/GetAtt tokens); no logical ID is written down, only
// the output names, which are the stack's interface. A check about one resource among several of
// its type (one of the functions, roles, queues, security groups) runs on s.only(its ID), so that it
// cannot pass because another resource of the type matches.

var (
	testRoot string // everything the tests write goes under it; removed at the end
	assetDir string // fake build/lambda: <fn>/bootstrap files, created in TestMain
)

func TestMain(m *testing.M) {
	root, err := os.MkdirTemp("", "infra-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testRoot = root
	dir := filepath.Join(root, "lambda")
	for _, fn := range FunctionNames {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err == nil {
			// Distinct content per function, so each gets its own asset like the real binaries.
			err = os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n# fake "+fn+"\n"), 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	assetDir = dir
	code := m.Run()
	jsii.Close()
	os.RemoveAll(root)
	os.Exit(code)
}

// newApp returns an App that synthesises under testRoot (by default each App would leave a
// cdk.outXXXX folder in the system temp directory).
func newApp(t *testing.T, context map[string]any) awscdk.App {
	t.Helper()
	out, err := os.MkdirTemp(testRoot, "cdk.out")
	if err != nil {
		t.Fatal(err)
	}
	props := &awscdk.AppProps{Outdir: jsii.String(out)}
	if context != nil {
		props.Context = &context
	}
	return awscdk.NewApp(props)
}

type variant string

const (
	variantAWS        variant = "aws"
	variantPublic     variant = "public"
	variantLocalStack variant = "localstack"
	variantTwoNATs    variant = "two-nat-gateways" // natGateways=2: one per AZ
)

// Settings of the LocalStack variant under test; deliberately not the defaults, to see them passed through.
const (
	testDSN         = "tester:secret@tcp(db.example:3306)/events?interpolateParams=true"
	testEndpointURL = "http://localstack.example:4566"
)

func (v variant) config() Config {
	cfg := Config{AssetDir: assetDir, DBDSN: DefaultLocalDSN, AWSEndpointURL: DefaultLocalEndpointURL, LambdaArch: "arm64",
		SweeperShards: defaultSweeperShards, NatGateways: defaultNatGateways}
	switch v {
	case variantPublic:
		cfg.PublicAPI = true
	case variantTwoNATs:
		cfg.NatGateways = 2
	case variantLocalStack:
		cfg.LocalStack = true
		cfg.DBDSN = testDSN
		cfg.AWSEndpointURL = testEndpointURL
		cfg.LambdaArch = "x86_64"
	}
	return cfg
}

type synthesized struct {
	stack       *ExactlyOnceStack
	template    assertions.Template
	json        map[string]any
	annotations assertions.Annotations
	missing     int // context lookups the app asked for
}

var (
	synthMu    sync.Mutex
	synthCache = map[variant]*synthesized{}
)

func synth(t *testing.T, v variant) *synthesized {
	t.Helper()
	synthMu.Lock()
	defer synthMu.Unlock()
	if s, ok := synthCache[v]; ok {
		return s
	}
	app := newApp(t, nil)
	stack, err := Build(app, v.config())
	if err != nil {
		t.Fatalf("Build(%s): %v", v, err)
	}
	asm := app.Synth(nil)
	missing := 0
	if m := asm.Manifest().Missing; m != nil {
		missing = len(*m)
	}
	tpl := assertions.Template_FromStack(stack.Stack, nil)
	raw, err := json.Marshal(tpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	s := &synthesized{
		stack:       stack,
		template:    tpl,
		json:        doc,
		annotations: assertions.Annotations_FromStack(stack.Stack),
		missing:     missing,
	}
	synthCache[v] = s
	return s
}

// check runs one assertions.Template call; those report a mismatch by panicking. It reports whether
// the call passed. The mismatch is reported here, not in a deferred function, so that the failure
// points at the line of the test that called check.
func check(t *testing.T, what string, f func()) bool {
	t.Helper()
	if mismatch := recovered(f); mismatch != nil {
		t.Errorf("%s:\n%v", what, mismatch)
		return false
	}
	return true
}

// recovered runs f and returns what it panicked with, or nil.
func recovered(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// must is check for an assertion whose captures the rest of the test reads: it stops the test on a
// mismatch, because an empty capture panics when read.
func must(t *testing.T, what string, f func()) {
	t.Helper()
	if !check(t, what, f) {
		t.FailNow()
	}
}

// only returns a template that holds nothing but the resource id of s. A matcher run on it checks
// that one resource: HasResourceProperties on the whole template passes when any resource of the
// type matches, so it cannot tell one function (or role, or security group) from the others.
func (s *synthesized) only(t *testing.T, id string) assertions.Template {
	t.Helper()
	r, ok := s.resources()[id]
	if !ok {
		t.Fatalf("no resource %s in the template", id)
	}
	return assertions.Template_FromJSON(&map[string]any{"Resources": map[string]any{id: r}}, nil)
}

// ref returns the logical ID behind a token that resolves to {"Ref": id}, e.g. fn.FunctionName().
func (s *synthesized) ref(t *testing.T, token *string) string {
	t.Helper()
	resolved := s.stack.Resolve(token)
	m, ok := resolved.(map[string]any)
	if !ok {
		t.Fatalf("token resolves to %#v, want a Ref", resolved)
	}
	id, ok := m["Ref"].(string)
	if !ok {
		t.Fatalf("token resolves to %#v, want a Ref", resolved)
	}
	return id
}

// getAttID returns the logical ID behind a token that resolves to {"Fn::GetAtt": [id, attr]}.
func (s *synthesized) getAttID(t *testing.T, token *string) string {
	t.Helper()
	resolved := s.stack.Resolve(token)
	if m, ok := resolved.(map[string]any); ok {
		if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
			if id, ok := ga[0].(string); ok {
				return id
			}
		}
	}
	t.Fatalf("token resolves to %#v, want Fn::GetAtt", resolved)
	return ""
}

// subnetRefs returns {"Ref": id} of each subnet of a selection, in the selection's order (the order
// the template lists them in).
func (s *synthesized) subnetRefs(t *testing.T, sel *awsec2.SubnetSelection) []any {
	t.Helper()
	var out []any
	for _, id := range *s.stack.Network.Vpc.SelectSubnets(sel).SubnetIds {
		out = append(out, refTo(s.ref(t, id)))
	}
	return out
}

// refTo and getAtt are the template's spelling of a reference to a logical ID.
func refTo(id string) map[string]any { return map[string]any{"Ref": id} }

func getAtt(id, attr string) map[string]any { return map[string]any{"Fn::GetAtt": []any{id, attr}} }

// grant is the pattern of an AWS::IAM::Policy attached to the role roleID with a statement that
// allows action on resource (each a value or a matcher).
func grant(roleID string, action, resource any) *map[string]any {
	return obj(map[string]any{
		"Roles": assertions.Match_ArrayWith(arr(refTo(roleID))),
		"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
			"Statement": assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{
				"Effect":   "Allow",
				"Action":   action,
				"Resource": resource,
			})))),
		})),
	})
}

// resources is the raw template's Resources, for only() and the walks below.
func (s *synthesized) resources() map[string]any {
	return s.json["Resources"].(map[string]any)
}

// The helpers below read the raw template. They serve the checks that something is *not* granted:
// a matcher can only say that a statement of one literal shape is absent, so "no statement grants
// sqs:ReceiveMessage" would pass unnoticed for an Action written as a string instead of a list, or
// for sqs:* or *. These helpers normalise Action and Resource to lists and understand wildcards.

// statement is one IAM policy statement with Action and Resource normalised to lists.
type statement struct {
	Effect    string
	Actions   []string
	Resources []any
}

func asList(v any) []any {
	switch t := v.(type) {
	case nil:
		return nil
	case []any:
		return t
	default:
		return []any{t}
	}
}

func statementsOf(doc any) []statement {
	d, _ := doc.(map[string]any)
	var out []statement
	for _, raw := range asList(d["Statement"]) {
		m := raw.(map[string]any)
		st := statement{Resources: asList(m["Resource"])}
		st.Effect, _ = m["Effect"].(string)
		for _, a := range asList(m["Action"]) {
			st.Actions = append(st.Actions, a.(string))
		}
		out = append(out, st)
	}
	return out
}

// policiesOfRole returns every statement of the AWS::IAM::Policy resources attached to a role and of
// the role's inline policies.
func (s *synthesized) policiesOfRole(t *testing.T, roleID string) []statement {
	t.Helper()
	var out []statement
	attached := s.template.FindResources(jsii.String("AWS::IAM::Policy"), obj(map[string]any{
		"Properties": assertions.Match_ObjectLike(obj(map[string]any{
			"Roles": assertions.Match_ArrayWith(arr(refTo(roleID))),
		})),
	}))
	for _, r := range *attached {
		out = append(out, statementsOf((*r)["Properties"].(map[string]any)["PolicyDocument"])...)
	}
	role, ok := s.resources()[roleID].(map[string]any)
	if !ok {
		t.Fatalf("no role %s in the template", roleID)
	}
	rp, _ := role["Properties"].(map[string]any)
	for _, pol := range asList(rp["Policies"]) {
		out = append(out, statementsOf(pol.(map[string]any)["PolicyDocument"])...)
	}
	return out
}

// allows reports whether any Allow statement grants action on a resource whose JSON contains resourceHint.
func allows(stmts []statement, action, resourceHint string) bool {
	for _, st := range stmts {
		if st.Effect != "Allow" || !hasAction(st.Actions, action) {
			continue
		}
		for _, r := range st.Resources {
			if strings.Contains(mustJSON(r), resourceHint) {
				return true
			}
		}
	}
	return false
}

func hasAction(actions []string, action string) bool {
	for _, a := range actions {
		if a == action || a == "*" {
			return true
		}
		if strings.HasSuffix(a, "*") && strings.HasPrefix(action, strings.TrimSuffix(a, "*")) {
			return true
		}
	}
	return false
}

// grantsAnywhere reports whether any Allow statement grants action at all.
func grantsAnywhere(stmts []statement, action string) bool {
	for _, st := range stmts {
		if st.Effect == "Allow" && hasAction(st.Actions, action) {
			return true
		}
	}
	return false
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func obj(m map[string]any) *map[string]any { return &m }

func arr(v ...any) *[]any { return &v }
