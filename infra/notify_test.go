package infra

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of notify.go and of what every alarm of the stack owes the operator: a notification on
// ALARM and on OK, on the one topic, and a description that names an entry of docs/runbook.md.

// runbookAnchors returns the anchors GitHub gives the headings of docs/runbook.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return anchors
}

func TestEveryAlarmNotifiesAndNamesItsRunbookEntry(t *testing.T) {
	anchors := runbookAnchors(t)
	link := regexp.MustCompile(`Runbook: docs/runbook\.md#([a-z0-9_-]+)$`)
	for _, v := range []variant{variantAWS, variantLocalStack} {
		s := synth(t, v)
		topic := refTo(s.ref(t, s.stack.Notifications.Topic.TopicArn()))
		alarms := s.template.FindResources(jsii.String("AWS::CloudWatch::Alarm"), nil)
		if len(*alarms) == 0 {
			t.Fatalf("%s: no alarms", v)
		}
		for id, r := range *alarms {
			p := (*r)["Properties"].(map[string]any)
			for _, key := range []string{"AlarmActions", "OKActions"} {
				if got := mustJSON(p[key]); got != mustJSON([]any{topic}) {
					t.Errorf("%s: alarm %s %s = %s, want the alarm topic alone", v, id, key, got)
				}
			}
			// CloudWatch refuses an alarm whose metric math reads more than 10 metrics.
			stats := 0
			for _, q := range asList(p["Metrics"]) {
				if _, ok := q.(map[string]any)["MetricStat"]; ok {
					stats++
				}
			}
			if stats > 10 {
				t.Errorf("%s: alarm %s reads %d metrics; an alarm may read 10 at most", v, id, stats)
			}
			desc, _ := p["AlarmDescription"].(string)
			m := link.FindStringSubmatch(desc)
			if m == nil {
				t.Errorf("%s: alarm %s does not end its description with its runbook entry: %q", v, id, desc)
				continue
			}
			if !anchors[m[1]] {
				t.Errorf("%s: alarm %s names docs/runbook.md#%s, which is no heading of docs/runbook.md", v, id, m[1])
			}
		}
	}
}

func TestAlarmTopic(t *testing.T) {
	s := synth(t, variantAWS)
	topicID := s.ref(t, s.stack.Notifications.Topic.TopicArn())
	check(t, "the alarm topic, named after the stack", func() {
		s.only(t, topicID).HasResourceProperties(jsii.String("AWS::SNS::Topic"), obj(map[string]any{"TopicName": StackName + "-alarms"}))
	})
	check(t, "CloudWatch alarms of this account may publish, over TLS only", func() {
		s.template.HasResourceProperties(jsii.String("AWS::SNS::TopicPolicy"), obj(map[string]any{
			"Topics": []any{refTo(topicID)},
			"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
				"Statement": assertions.Match_ArrayWith(arr(
					assertions.Match_ObjectLike(obj(map[string]any{
						"Effect": "Deny", "Action": "sns:Publish", "Principal": "*",
						"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
					})),
					assertions.Match_ObjectLike(obj(map[string]any{
						"Effect": "Allow", "Action": "sns:Publish", "Resource": refTo(topicID),
						"Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
						"Condition": assertions.Match_ObjectLike(obj(map[string]any{
							"StringEquals": map[string]any{"aws:SourceAccount": refTo("AWS::AccountId")},
						})),
					})),
				)),
			})),
		}))
	})
	check(t, "no subscription unless asked for", func() { s.template.ResourceCountIs(jsii.String("AWS::SNS::Subscription"), jsii.Number(0)) })
	check(t, "the topic's ARN is an output", func() {
		s.template.HasOutput(jsii.String("AlarmTopicArn"), obj(map[string]any{"Value": refTo(topicID)}))
	})
}

func TestAlarmEmail(t *testing.T) {
	app := newApp(t, map[string]any{ctxAlarmEmail: " oncall@example.com "})
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		t.Fatal(err)
	}
	cfg.AssetDir = assetDir
	stack, err := Build(app, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tpl := assertions.Template_FromStack(stack.Stack, nil)
	check(t, "an email subscription of the address, on the alarm topic", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SNS::Subscription"), obj(map[string]any{
			"Protocol": "email", "Endpoint": "oncall@example.com", "TopicArn": stack.Resolve(stack.Notifications.Topic.TopicArn()),
		}))
		tpl.ResourceCountIs(jsii.String("AWS::SNS::Subscription"), jsii.Number(1))
	})

	for _, bad := range []string{"oncall", "a@b", "a@example.com,b@example.com", "a b@example.com", "@example.com"} {
		app := newApp(t, map[string]any{ctxAlarmEmail: bad})
		if _, err := ConfigFromContext(app.Node()); err == nil || !strings.Contains(err.Error(), ctxAlarmEmail) {
			t.Errorf("alarmEmail=%q: err %v, want one naming %s", bad, err, ctxAlarmEmail)
		}
	}
}
