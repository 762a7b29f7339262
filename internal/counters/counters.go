// Package counters is the counter service's consumer: the SQS-triggered function that applies
// counter messages ({"entityId", "entityType", "userId", "action": "added" | "readed"}) to the
// counts, exactly once each whatever the queue's duplicates and order, and publishes one result
// notification per message.
//
// A batch is applied in one transaction (counterstore's ApplyCounterMessages), which also records the
// batch's notifications; they are published after the commit and marked published. A
// notification whose publish failed, or whose process died before publishing, is published by the
// sweeper later (internal/sweeping/counters.go): at least once. Consumers of the notifications drop
// repeats by their id, and stale ones by their version.
package counters

import (
	"context"
	"encoding/json"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
)

// Store applies counter messages and records what was published (internal/mysql/counterstore
// implements it).
type Store interface {
	ApplyCounterMessages(ctx context.Context, msgs []exactlyonce.CounterMessage) ([]exactlyonce.CounterResult, error)
	MarkCounterPublished(ctx context.Context, ids []string) error
}

// Notification is a result notification ready to publish: its id and its JSON body.
type Notification struct {
	ID   string
	Body []byte
}

// Publisher publishes notifications (an SNS topic on AWS, an SQS queue locally). It returns the
// ids of those it published; an error, or an id left out, leaves a notification for the sweeper.
type Publisher interface {
	Publish(ctx context.Context, ns []Notification) (published []string, err error)
}

// PublishTimeout bounds the publish after a batch's commit: a notification not published by then
// is the sweeper's.
const PublishTimeout = 5 * time.Second

// Consumer is the counter function's handler.
type Consumer struct {
	Store Store
	// Publisher publishes the notifications after each commit. Nil: they wait for the sweeper.
	Publisher Publisher
	Logger    *slog.Logger
	// Visibility, when set, keeps a batch's messages invisible for as long as it is handled.
	Visibility *sqsbatch.Visibility
	// Applied, when set, hears of every batch's results after its commit (tests, the benchmark).
	Applied func([]exactlyonce.CounterResult)
	// Metrics, when set, records the batches' metrics (messages applied, duplicates, rejected, the
	// store's transactions); nil: the Recorder the context carries, if any (the Lambda's).
	Metrics *metrics.Recorder
}

// Handle is the Lambda handler. It never returns an error (which would fail the whole batch):
//
//   - a message that does not decode fails, every time, so the queue moves it to the dead-letter
//     queue after its receive limit; it never holds up the rest of the batch;
//   - the other messages are applied in one transaction: if it commits, they all succeed (a
//     duplicate too: it is answered with applied false); if it fails, they all come back and are
//     applied then (a commit whose reply was lost is found out by the directories: its messages
//     come back as duplicates).
//
// The publish of the notifications does not decide a message's fate: they are recorded, and the
// sweeper publishes what this call could not.
func (c *Consumer) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	if c.Metrics != nil {
		ctx = metrics.With(ctx, c.Metrics)
	}
	rec := metrics.From(ctx)
	decode := func(body string) (exactlyonce.CounterMessage, error) {
		m, err := exactlyonce.DecodeCounterMessage(body)
		if err != nil {
			rec.Add(metrics.CounterRejected, 1)
		}
		return m, err
	}
	h := sqsbatch.Handler[exactlyonce.CounterMessage]{Name: "counter", Decode: decode,
		Work: c.work, Visibility: c.Visibility, Logger: c.logger()}
	return h.Handle(ctx, ev)
}

func (c *Consumer) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

func (c *Consumer) work(ctx context.Context, msgs []sqsbatch.Message[exactlyonce.CounterMessage]) ([]string, error) {
	bodies := make([]exactlyonce.CounterMessage, len(msgs))
	for i, m := range msgs {
		bodies[i] = m.Body
	}
	results, err := c.Store.ApplyCounterMessages(ctx, bodies)
	if err != nil {
		return nil, err
	}
	applied := 0
	for _, r := range results {
		if r.Applied {
			applied++
		}
	}
	rec := metrics.From(ctx)
	rec.Add(metrics.CounterApplied, applied)
	rec.Add(metrics.CounterDuplicates, len(results)-applied)
	if c.Applied != nil {
		c.Applied(results)
	}
	c.publish(ctx, results)
	return nil, nil
}

// publish publishes a committed batch's notifications and marks those published. Failures are
// logged: the notifications stay recorded for the sweeper.
func (c *Consumer) publish(ctx context.Context, results []exactlyonce.CounterResult) {
	if c.Publisher == nil || len(results) == 0 {
		return
	}
	ns, err := Notifications(results)
	if err != nil {
		c.logger().Error("counter: notifications not encoded; the sweeper publishes them", "err", err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	published, err := c.Publisher.Publish(pctx, ns)
	if err != nil {
		c.logger().Warn("counter: notifications not published; the sweeper publishes them",
			"notifications", len(ns), "published", len(published), "err", err)
	}
	if err := c.Store.MarkCounterPublished(pctx, published); err != nil {
		c.logger().Warn("counter: notifications published but not marked; the sweeper publishes them again",
			"notifications", len(published), "err", err)
	}
}

// Notifications encodes results as notifications.
func Notifications(results []exactlyonce.CounterResult) ([]Notification, error) {
	out := make([]Notification, len(results))
	for i, r := range results {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		out[i] = Notification{ID: r.ID, Body: b}
	}
	return out, nil
}
