// Package sqsbatch is a queue sender (queue.Sender) that coalesces the sends of concurrent callers
// into SendMessageBatch calls of up to ten messages, the way a database groups the commits of
// concurrent transactions: no timer, no added latency when idle. A caller whose message finds a
// free flusher is sent at once, alone; callers that arrive while every flusher is busy wait for the
// next free one and share its call. Each caller still learns the fate of its own message.
//
// On Lambda an execution environment serves one request at a time, so every batch holds one
// message and this is SendMessage by another name. In a process serving many requests (the local
// runner, a container) it cuts the SQS calls, and their signing and HTTP round trips, by up to ten.
package sqsbatch

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// MaxBatch is the most messages SQS takes in one SendMessageBatch.
const MaxBatch = 10

// Sender sends messages naming events to one queue, in batches. Safe for concurrent use.
type Sender struct {
	client   *sqs.Client
	queueURL string
	flushers int
	timeout  time.Duration

	mu      sync.Mutex
	waiting []*message
	active  int // flushers running
}

// Config configures a Sender. Zero values take the defaults shown.
type Config struct {
	// Flushers is the most SendMessageBatch calls in flight at once. Default 4.
	Flushers int
	// Timeout bounds one SendMessageBatch call. Default 5 s.
	Timeout time.Duration
}

// New returns a Sender to the queue at queueURL.
func New(client *sqs.Client, queueURL string, cfg Config) *Sender {
	return &Sender{client: client, queueURL: queueURL,
		flushers: max(1, cmp.Or(cfg.Flushers, 4)), timeout: cmp.Or(cfg.Timeout, 5*time.Second)}
}

var _ queue.Sender = (*Sender)(nil)

type message struct {
	id   int64
	done chan error // receives the outcome once
}

// Send sends the message naming event id and returns when SQS has accepted or refused it, or when
// ctx ends (the message may still be sent then).
func (s *Sender) Send(ctx context.Context, id int64) error {
	m := &message{id: id, done: make(chan error, 1)}
	s.mu.Lock()
	s.waiting = append(s.waiting, m)
	if s.active < s.flushers {
		s.active++
		go s.flush()
	}
	s.mu.Unlock()
	select {
	case err := <-m.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush sends what is waiting, ten at a time, until nothing is. It serves every caller, so it does
// not run on any one caller's context; each call has its own timeout. It ends when the queue is
// empty, and its callers wait for it, so it never outlives the requests that started it.
func (s *Sender) flush() {
	for {
		s.mu.Lock()
		n := min(len(s.waiting), MaxBatch)
		if n == 0 {
			s.active--
			s.mu.Unlock()
			return
		}
		batch := s.waiting[:n:n]
		s.waiting = s.waiting[n:]
		s.mu.Unlock()
		s.send(batch)
	}
}

func (s *Sender) send(batch []*message) {
	entries := make([]types.SendMessageBatchRequestEntry, len(batch))
	for i, m := range batch {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(queue.Encode(m.id))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
	if err != nil {
		for _, m := range batch {
			m.done <- err
		}
		return
	}
	// SQS lists every entry as Successful or Failed, and the Failed list is the authority: an entry
	// it does not name was accepted. (goaws answers with its own key for the successful entries,
	// which the SDK does not read; counting only Failed is right for both.)
	outcome := make([]error, len(batch))
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(batch) {
			outcome[i] = fmt.Errorf("send message: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	for i, m := range batch {
		m.done <- outcome[i]
	}
}
