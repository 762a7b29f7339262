package infra

import (
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Tests of counters.go: the counter service's queue and DLQ, function, mapping, topic, alarms and
// database user.

func TestCounterService(t *testing.T) {
	s := synth(t, variantAWS)
	c := s.stack.Counters
	queueID := s.ref(t, c.Queue.QueueUrl())
	dlqID := s.ref(t, c.DeadLetter.QueueUrl())
	fnID := s.ref(t, c.Function.FunctionName())
	topicID := s.ref(t, c.Topic.TopicArn())
	sweeperID := s.ref(t, s.stack.Functions.Sweeper.FunctionName())

	check(t, "counters queue: encrypted, redriven to its DLQ after 5 receives", func() {
		s.only(t, queueID).HasResourceProperties(jsii.String("AWS::SQS::Queue"), obj(map[string]any{
			"SqsManagedSseEnabled": true,
			"VisibilityTimeout":    6 * counterTimeout.Seconds(),
			"RedrivePolicy":        map[string]any{"deadLetterTargetArn": getAtt(dlqID, "Arn"), "maxReceiveCount": 5},
		}))
	})
	check(t, "counters DLQ: encrypted, 14 days", func() {
		s.only(t, dlqID).HasResourceProperties(jsii.String("AWS::SQS::Queue"), obj(map[string]any{
			"SqsManagedSseEnabled": true, "MessageRetentionPeriod": 14 * 24 * 3600,
		}))
	})
	check(t, "counter function: its own database user, the topic and the queue in its environment", func() {
		s.only(t, fnID).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Timeout": counterTimeout.Seconds(),
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
				"DB_USER":           databaseCounterUser,
				"DB_IAM_AUTH":       "true",
				"DB_MIGRATE":        "false",
				"COUNTER_TOPIC_ARN": refTo(topicID),
				"QUEUE_URL":         refTo(queueID),
			})},
		}))
	})
	check(t, "the sweeper republishes to the topic", func() {
		s.only(t, sweeperID).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{"COUNTER_TOPIC_ARN": refTo(topicID)})},
		}))
	})
	check(t, "counter mapping: per-message failures, a concurrency cap", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"EventSourceArn":        getAtt(queueID, "Arn"),
			"FunctionName":          refTo(fnID),
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
			"ScalingConfig":         map[string]any{"MaximumConcurrency": counterConcurrency},
		}))
	})
	check(t, "topic: encrypted with the AWS managed key", func() {
		s.only(t, topicID).HasResourceProperties(jsii.String("AWS::SNS::Topic"), obj(map[string]any{
			"KmsMasterKeyId": assertions.Match_AnyValue(),
		}))
	})
	check(t, "topic enforces TLS", func() {
		s.template.HasResourceProperties(jsii.String("AWS::SNS::TopicPolicy"), obj(map[string]any{
			"Topics": []any{refTo(topicID)},
			"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(arr(assertions.Match_ObjectLike(obj(map[string]any{
				"Effect": "Deny", "Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			}))))},
		}))
	})
	// Publish is granted to the counter function and the sweeper, on this topic only.
	for _, name := range []string{"counter", "sweeper"} {
		check(t, name+" may publish to the topic", func() {
			s.template.HasResourceProperties(jsii.String("AWS::IAM::Policy"), obj(map[string]any{
				"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(arr(map[string]any{
					"Action": "sns:Publish", "Effect": "Allow", "Resource": refTo(topicID),
				}))},
			}))
		})
	}
	check(t, "alarms: DLQ messages, function errors, count mismatches, counter sweep errors", func() {
		s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"MetricName": "ApproximateNumberOfMessagesVisible",
			"Dimensions": []any{map[string]any{"Name": "QueueName", "Value": getAtt(dlqID, "QueueName")}},
			"Threshold":  0,
		}))
		s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"MetricName": "Errors",
			"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": refTo(fnID)}},
		}))
		s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"MetricName": counterMismatchesMetric,
			"Namespace":  sweeperMetricsNamespace,
			"Dimensions": []any{map[string]any{"Name": sweeperMetricDimension, "Value": refTo(sweeperID)}},
			"Threshold":  0,
		}))
		s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"MetricName":         counterSweepErrorsMetric,
			"Namespace":          sweeperMetricsNamespace,
			"Dimensions":         []any{map[string]any{"Name": sweeperMetricDimension, "Value": refTo(sweeperID)}},
			"Threshold":          1,
			"ComparisonOperator": "GreaterThanOrEqualToThreshold",
			"EvaluationPeriods":  sweeperAlarmEvaluations,
			"DatapointsToAlarm":  sweeperAlarmDatapoints,
			"Period":             60,
			"AlarmActions":       assertions.Match_AnyValue(),
		}))
	})
	check(t, "migrate creates the counter's database user", func() {
		s.only(t, s.ref(t, s.stack.Functions.Migrate.FunctionName())).HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
				"DB_FUNCTION_USERS": assertions.Match_StringLikeRegexp(jsii.String("counter:" + databaseCounterUser)),
			})},
		}))
	})
}

// LocalStack does not implement ScalingConfig: the counter mapping has no cap there.
func TestCounterServiceLocalStack(t *testing.T) {
	s := synth(t, variantLocalStack)
	fnID := s.ref(t, s.stack.Counters.Function.FunctionName())
	check(t, "counter mapping without ScalingConfig", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"FunctionName":  refTo(fnID),
			"ScalingConfig": assertions.Match_Absent(),
		}))
	})
}

// snsEgress is the number of egress rules of security group sgID to the SNS endpoint on 443 (the
// counter function's and the sweeper's, to publish notifications).
func (s *synthesized) snsEgress(t *testing.T, sgID string) int {
	t.Helper()
	if s.stack.Counters.SnsEndpoint == nil {
		return 0
	}
	endpointSG := s.getAttID(t, (*s.stack.Counters.SnsEndpoint.Connections().SecurityGroups())[0].SecurityGroupId())
	return len(*s.template.FindResources(jsii.String("AWS::EC2::SecurityGroupEgress"), obj(map[string]any{
		"Properties": assertions.Match_ObjectLike(obj(map[string]any{
			"GroupId":                    getAtt(sgID, "GroupId"),
			"DestinationSecurityGroupId": getAtt(endpointSG, "GroupId"),
			"FromPort":                   443,
			"ToPort":                     443,
		})),
	})))
}
