package infra

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of queues.go: the main queue and its dead-letter queue.

func TestQueues(t *testing.T) {
	s := synth(t, variantAWS)
	mainID := s.ref(t, s.stack.Queues.Main.QueueUrl())
	dlqID := s.ref(t, s.stack.Queues.DeadLetter.QueueUrl())
	// Each queue alone, so a property of one is never satisfied by the other.
	mainQueue, dlq := s.only(t, mainID), s.only(t, dlqID)
	queue := jsii.String("AWS::SQS::Queue")

	visibility := assertions.NewCapture(nil)
	receives := assertions.NewCapture(nil)
	mainRetention := assertions.NewCapture(nil)
	mainName := assertions.NewCapture(nil)
	must(t, "main queue: encrypted, redriven to the DLQ", func() {
		mainQueue.HasResourceProperties(queue, obj(map[string]any{
			"SqsManagedSseEnabled":   true,
			"VisibilityTimeout":      visibility,
			"MessageRetentionPeriod": mainRetention,
			"QueueName":              mainName,
			"RedrivePolicy": map[string]any{
				"deadLetterTargetArn": getAtt(dlqID, "Arn"),
				"maxReceiveCount":     receives,
			},
		}))
	})
	fnTimeout := assertions.NewCapture(nil)
	must(t, "processor timeout", func() {
		s.only(t, s.ref(t, s.stack.Functions.Processor.FunctionName())).HasResourceProperties(jsii.String("AWS::Lambda::Function"),
			obj(map[string]any{"Timeout": fnTimeout}))
	})
	if vt, ft := *visibility.AsNumber(), *fnTimeout.AsNumber(); vt < 6*ft {
		t.Errorf("visibility timeout %v s < 6 x processor timeout %v s", vt, ft)
	}
	if n := *receives.AsNumber(); n < 5 {
		t.Errorf("maxReceiveCount %v, want >= 5", n)
	}

	// The DLQ keeps messages 14 days (the SQS maximum), longer than the main queue, and accepts
	// redrives from the main queue only; the source is the ARN built from the main queue's name.
	const fourteenDays = 14 * 24 * 3600
	check(t, "DLQ: encrypted, 14 days retention, redrive allowed from the main queue only", func() {
		dlq.HasResourceProperties(queue, obj(map[string]any{
			"SqsManagedSseEnabled":   true,
			"MessageRetentionPeriod": fourteenDays,
			"RedriveAllowPolicy": map[string]any{
				"redrivePermission": "byQueue",
				"sourceQueueArns": []any{map[string]any{"Fn::Join": []any{"", assertions.Match_ArrayWith(arr(
					":" + *mainName.AsString(),
				))}}},
			},
		}))
	})
	if m := *mainRetention.AsNumber(); m >= fourteenDays {
		t.Errorf("main queue retention %v s, want shorter than the DLQ's 14 days", m)
	}

	// enforceSSL: each queue's policy denies requests without aws:SecureTransport.
	for name, id := range map[string]string{"main": mainID, "dlq": dlqID} {
		check(t, name+" queue enforces TLS", func() {
			s.template.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), obj(map[string]any{
				"Queues": assertions.Match_ArrayWith(arr(refTo(id))),
				"PolicyDocument": assertions.Match_ObjectLike(obj(map[string]any{
					"Statement": assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{
						"Effect":    "Deny",
						"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
					})))),
				})),
			}))
		})
	}
}
