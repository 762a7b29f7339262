package redrive

// Finding a redrive's queues (Resolve) and checking, before a message is touched, that the DLQ
// is the source queue's alone (CheckSources).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// Queues are the source queue and its DLQ.
type Queues struct {
	SourceURL, SourceARN string
	DLQURL, DLQARN       string
}

// Resolve finds the source queue (a name or URL) and its DLQ: the queue the source queue's
// RedrivePolicy names (deadLetterTargetArn). dlq (a name or URL), if given, must be that queue: a
// redrive sends a DLQ's messages to the queue it names as their source, so another queue's DLQ
// would land that queue's messages in this one. Naming another queue, or any queue for a source
// queue without a RedrivePolicy, is an error wrapping ErrRefused.
func Resolve(ctx context.Context, c SQS, source, dlq string) (Queues, error) {
	var q Queues
	var err error
	if q.SourceURL, err = queueURL(ctx, c, source, ""); err != nil {
		return q, err
	}
	attrs, err := attributes(ctx, c, q.SourceURL, types.QueueAttributeNameQueueArn, types.QueueAttributeNameRedrivePolicy)
	if err != nil {
		return q, err
	}
	q.SourceARN = attrs[string(types.QueueAttributeNameQueueArn)]
	target, err := deadLetterTarget(attrs[string(types.QueueAttributeNameRedrivePolicy)])
	if dlq != "" {
		if q.DLQURL, err = queueURL(ctx, c, dlq, ""); err != nil {
			return q, err
		}
		dattrs, err := attributes(ctx, c, q.DLQURL, types.QueueAttributeNameQueueArn)
		if err != nil {
			return q, err
		}
		q.DLQARN = dattrs[string(types.QueueAttributeNameQueueArn)]
		if target == "" {
			return q, fmt.Errorf("%s is not the dead-letter queue of %s, which has no RedrivePolicy: %w", cmp.Or(q.DLQARN, q.DLQURL), q.SourceURL, ErrRefused)
		}
		if q.DLQARN != target {
			return q, fmt.Errorf("%s is not the dead-letter queue of %s (its RedrivePolicy names %s): its messages would go to a queue they did not come from: %w",
				cmp.Or(q.DLQARN, q.DLQURL), q.SourceURL, target, ErrRefused)
		}
	} else {
		if err != nil {
			return q, fmt.Errorf("queue %s %w", source, err)
		}
		// arn:aws:sqs:<region>:<account>:<name>
		parts := strings.Split(target, ":")
		if len(parts) != 6 || parts[5] == "" {
			return q, fmt.Errorf("queue %s's RedrivePolicy names %q, which is not a queue ARN", source, target)
		}
		q.DLQARN = target
		if q.DLQURL, err = queueURL(ctx, c, parts[5], parts[4]); err != nil {
			return q, err
		}
	}
	if q.SourceARN == "" || q.DLQARN == "" {
		return q, fmt.Errorf("the endpoint gave no QueueArn for %s or %s", q.SourceURL, q.DLQURL)
	}
	if q.SourceURL == q.DLQURL {
		return q, fmt.Errorf("the source queue and the DLQ are the same queue, %s", q.SourceURL)
	}
	return q, nil
}

// deadLetterTarget returns the DLQ a RedrivePolicy names (its deadLetterTargetArn), or "" and an
// error saying there is none.
func deadLetterTarget(policy string) (string, error) {
	var p struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	}
	if policy == "" || json.Unmarshal([]byte(policy), &p) != nil || p.DeadLetterTargetArn == "" {
		return "", fmt.Errorf("has no RedrivePolicy naming its DLQ (%q)", policy)
	}
	return p.DeadLetterTargetArn, nil
}

// ErrRefused is the error of a redrive refused before anything moved, because it would move
// messages into a queue they did not come from.
var ErrRefused = errors.New("refused before anything moved")

// CheckSources refuses (an error wrapping ErrRefused) a DLQ that is the dead-letter queue of other
// queues too: SQS lets several queues name one DLQ, and moving all its messages to one source
// queue would send the others' messages there. It asks ListDeadLetterSourceQueues (AWS's answer
// for the queues whose RedrivePolicy names the DLQ), page after page until one names another queue
// (at most maxSourcePages); an endpoint that lacks that action (goaws) has the same question
// answered from its queues' RedrivePolicies, for at most maxScanned queues. The source queue is
// recognised under the URL it was resolved by, or any URL of its account and name (sameQueue).
// Redrive and PeekAtMost check it before they touch a message.
func CheckSources(ctx context.Context, c SQS, q Queues) error {
	var others []string
	add := func(sources []string) {
		for _, u := range sources {
			if u != q.SourceURL && !sameQueue(u, q.SourceARN) {
				others = append(others, u)
			}
		}
	}
	// The pages until one names another queue, or the last: SQS promises no full page, so a page
	// listing only the source queue may still have a next one.
	var token *string
	for page := 0; len(others) == 0; page++ {
		if page == maxSourcePages {
			return fmt.Errorf("ListDeadLetterSourceQueues of %s lists more than %d pages: cannot tell whether it is the dead-letter queue of other queues too: %w",
				q.DLQURL, maxSourcePages, ErrRefused)
		}
		rec := &recorder{}
		out, err := c.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{
			QueueUrl: aws.String(q.DLQURL), MaxResults: aws.Int32(10), NextToken: token,
		}, rec.option)
		if err != nil && page == 0 && unknownAction(err, rec) != "" {
			sources, err := scanSources(ctx, c, q.DLQARN)
			if err != nil {
				return err
			}
			add(sources)
			break
		}
		if err != nil {
			return fmt.Errorf("list the source queues of %s: %w", q.DLQURL, err)
		}
		add(out.QueueUrls)
		if token = out.NextToken; aws.ToString(token) == "" {
			break
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("%s is also the dead-letter queue of %s: moving all its messages to %s would send theirs there too; "+
			"move each message back to its own source with a move task without a destination (aws sqs start-message-move-task --source-arn %s): %w",
			q.DLQARN, strings.Join(others, ", "), q.SourceURL, q.DLQARN, ErrRefused)
	}
	return nil
}

// maxSourcePages bounds the pages of ListDeadLetterSourceQueues read for a DLQ's sources (10
// queues a page): past it, the DLQ is refused as one whose sources cannot be told.
const maxSourcePages = 100

// maxScanned bounds the queues scanned for a DLQ's sources where the endpoint lacks
// ListDeadLetterSourceQueues: one ListQueues page.
const maxScanned = 1000

// scanSources returns the URLs of the queues whose RedrivePolicy names dlqARN, among those
// ListQueues lists: what ListDeadLetterSourceQueues answers, for an endpoint that lacks it. A queue
// deleted meanwhile is no source; more than maxScanned queues is an error (a source could be missed).
func scanSources(ctx context.Context, c SQS, dlqARN string) ([]string, error) {
	list, err := c.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(maxScanned)})
	if err != nil {
		return nil, fmt.Errorf("list the queues, to find the source queues of %s: %w", dlqARN, err)
	}
	if len(list.QueueUrls) > maxScanned || aws.ToString(list.NextToken) != "" {
		return nil, fmt.Errorf("the endpoint lacks ListDeadLetterSourceQueues and lists more than %d queues: "+
			"cannot tell whether %s is the dead-letter queue of other queues too: %w", maxScanned, dlqARN, ErrRefused)
	}
	var sources []string
	for _, u := range list.QueueUrls {
		attrs, err := attributes(ctx, c, u, types.QueueAttributeNameRedrivePolicy)
		if err != nil {
			if gone(ctx, c, u) {
				continue
			}
			return nil, err
		}
		if target, _ := deadLetterTarget(attrs[string(types.QueueAttributeNameRedrivePolicy)]); target == dlqARN {
			sources = append(sources, u)
		}
	}
	return sources, nil
}

// gone says whether the queue at url no longer exists: GetQueueUrl of its name answers that it does
// not (an endpoint's answer to the attributes of a deleted queue varies: goaws says
// InvalidParameterValue).
func gone(ctx context.Context, c SQS, url string) bool {
	_, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(url[strings.LastIndex(url, "/")+1:])})
	var missing *types.QueueDoesNotExist
	var apiErr smithy.APIError
	return errors.As(err, &missing) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || apiErr.ErrorCode() == "QueueDoesNotExist")
}

// sameQueue says whether the queue URL url (https://<host>/<account>/<name>) is the queue arn
// (arn:<partition>:sqs:<region>:<account>:<name>): the host of a URL varies (sqs.<region>.amazonaws.com,
// the legacy <region>.queue.amazonaws.com); its account and name do not.
func sameQueue(url, arn string) bool {
	parts := strings.Split(arn, ":")
	segs := strings.Split(strings.TrimSuffix(url, "/"), "/")
	return len(parts) == 6 && len(segs) >= 2 && segs[len(segs)-2] == parts[4] && segs[len(segs)-1] == parts[5]
}

// QueueURL returns nameOrURL if it is a URL, else the URL of the queue of that name.
func QueueURL(ctx context.Context, c SQS, nameOrURL string) (string, error) {
	return queueURL(ctx, c, nameOrURL, "")
}

// queueURL returns nameOrURL if it is a URL, else the URL of the queue of that name (of account
// owner, if not empty).
func queueURL(ctx context.Context, c SQS, nameOrURL, owner string) (string, error) {
	if strings.HasPrefix(nameOrURL, "https://") || strings.HasPrefix(nameOrURL, "http://") {
		return nameOrURL, nil
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(nameOrURL)}
	if owner != "" {
		in.QueueOwnerAWSAccountId = aws.String(owner)
	}
	out, err := c.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("queue %q: %w", nameOrURL, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

func attributes(ctx context.Context, c SQS, url string, names ...types.QueueAttributeName) (map[string]string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return nil, fmt.Errorf("attributes of %s: %w", url, err)
	}
	return out.Attributes, nil
}

// visible returns how many messages a queue holds visible (approximately, as SQS says; the local
// endpoint's count is exact).
func visible(ctx context.Context, c SQS, url string) (int, error) {
	attrs, err := attributes(ctx, c, url, types.QueueAttributeNameApproximateNumberOfMessages)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(attrs[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		return 0, fmt.Errorf("ApproximateNumberOfMessages of %s: %w", url, err)
	}
	return n, nil
}
