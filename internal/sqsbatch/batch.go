// Package sqsbatch is the part every SQS-triggered handler shares: it takes a batch of records
// apart with the handler's own decoder, keeps the batch invisible while it is being handled
// (Visibility), hands the decoded messages to the handler's own work, and answers the event source
// mapping with exactly the messages that must come back (ReportBatchItemFailures).
//
// The mapping's contract: an error returned by the handler fails the whole batch; an empty list of
// failures means every message succeeded; an item identifier that names no message of the batch
// fails the whole batch. So a Handler never returns an error and only ever names messages of the
// batch, each at most once.
package sqsbatch

import (
	"context"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/events"
)

// Message is one decoded record of a batch.
type Message[M any] struct {
	// ID is the record's messageId, the identifier a failure is reported by.
	ID string
	// Body is what the handler's decoder made of the record's body.
	Body M
	// Record is the record as delivered.
	Record events.SQSMessage
}

// Handler handles the batches of one SQS-triggered function.
type Handler[M any] struct {
	// Name prefixes the handler's log lines ("processor", "counter").
	Name string
	// Decode turns a record's body into a message. A body it rejects fails, every time it is
	// delivered, so the queue moves it to the dead-letter queue after its receive limit; it never
	// holds up the rest of the batch. Required.
	Decode func(body string) (M, error)
	// Work handles the decoded messages of a batch and returns the ids of those that must come
	// back. An error means that none of them was handled (a transaction failed as a whole): every
	// decoded message comes back. Ids it returns that name no message of the batch are ignored and
	// logged, since the mapping would fail the whole batch for them. Required.
	Work func(ctx context.Context, msgs []Message[M]) (failed []string, err error)
	// Visibility, when set, keeps the batch's messages invisible for as long as the batch is being
	// handled, so that a batch slower than the queue's visibility timeout is not delivered to a
	// second invocation meanwhile. Nil: no extension.
	Visibility *Visibility
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Handle is the Lambda handler. It never returns an error (which would fail the whole batch): it
// names exactly the messages that must come back.
func (h *Handler[M]) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := h.Logger
	if log == nil {
		log = slog.Default()
	}
	if h.Visibility != nil && len(ev.Records) > 0 {
		var wg sync.WaitGroup
		stop := h.Visibility.keep(ctx, ev.Records, log, &wg)
		defer wg.Wait() // no extension outlives the handler: the mapping deletes next
		defer stop()
	}

	failed := map[string]bool{}
	var resp events.SQSEventResponse
	fail := func(id string) {
		if !failed[id] {
			failed[id] = true
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
	}
	msgs := make([]Message[M], 0, len(ev.Records))
	for _, r := range ev.Records {
		body, err := h.Decode(r.Body)
		if err != nil {
			log.Warn(h.Name+": malformed message", "messageId", r.MessageId,
				"receiveCount", r.Attributes["ApproximateReceiveCount"], "err", err)
			fail(r.MessageId)
			continue
		}
		msgs = append(msgs, Message[M]{ID: r.MessageId, Body: body, Record: r})
	}
	if len(msgs) == 0 {
		return resp, nil
	}

	ids, err := h.Work(ctx, msgs)
	if err != nil {
		log.Error(h.Name+": batch failed; its messages will be delivered again", "messages", len(msgs), "err", err)
		for _, m := range msgs {
			fail(m.ID)
		}
		return resp, nil
	}
	inBatch := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		inBatch[m.ID] = true
	}
	for _, id := range ids {
		if !inBatch[id] {
			log.Error(h.Name+": work named a message that is not in the batch; ignored", "messageId", id)
			continue
		}
		fail(id)
	}
	return resp, nil
}
