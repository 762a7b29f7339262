package infra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Queues are the main event queue and its dead-letter queue.
type Queues struct {
	constructs.Construct
	Main       awssqs.Queue
	DeadLetter awssqs.Queue
}

// NewQueues creates both queues, SSE-SQS encrypted and refusing non-TLS requests.
//
// The queues have fixed names (<stack>-events, <stack>-events-dlq) for one reason: the DLQ's redrive
// allow policy must name its source queue, and referring to the main queue's ARN attribute would make
// a dependency cycle (the main queue's redrive policy already refers to the DLQ). With a known name the
// source ARN is computed, not referenced. Fixed names also make the LocalStack and SAM queue URLs
// predictable.
func NewQueues(scope constructs.Construct, id string) *Queues {
	c := constructs.NewConstruct(scope, &id)
	stack := awscdk.Stack_Of(c)
	mainName := *stack.StackName() + "-events"
	dlqName := mainName + "-dlq"

	mainArn := stack.FormatArn(&awscdk.ArnComponents{
		Service:  jsii.String("sqs"),
		Resource: jsii.String(mainName),
	})
	source := awssqs.Queue_FromQueueArn(c, jsii.String("MainQueueRef"), mainArn)

	dlq := awssqs.NewQueue(c, jsii.String("DeadLetterQueue"), &awssqs.QueueProps{
		QueueName:       jsii.String(dlqName),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Seconds(jsii.Number(dlqRetention.Seconds())),
		RedriveAllowPolicy: &awssqs.RedriveAllowPolicy{
			RedrivePermission: awssqs.RedrivePermission_BY_QUEUE,
			SourceQueues:      &[]awssqs.IQueue{source},
		},
	})

	main := awssqs.NewQueue(c, jsii.String("Queue"), &awssqs.QueueProps{
		QueueName:         jsii.String(mainName),
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		RetentionPeriod:   awscdk.Duration_Seconds(jsii.Number(queueRetention.Seconds())),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(visibilityTimeout.Seconds())),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           dlq,
			MaxReceiveCount: jsii.Number(maxReceiveCount),
		},
	})
	return &Queues{Construct: c, Main: main, DeadLetter: dlq}
}
