// Package processing is the SQS-triggered processor: it gives pending events their values, exactly
// once, and tells the queue which messages failed so that only those are delivered again.
package processing

import (
	"context"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// Store is what the processor needs of the store.
type Store interface {
	ProcessIDs(ctx context.Context, ids []int64, by string, newValue func(int64) string) (map[int64]exactlyonce.Outcome, error)
}

// Processor handles batches of queue messages.
type Processor struct {
	Store    Store
	Logger   *slog.Logger
	NewValue func(id int64) string // default: exactlyonce.NewValue
	// Visibility, when set, keeps a batch's messages invisible for as long as the batch is being
	// processed, so that a batch slower than the queue's visibility timeout is not delivered to a
	// second worker meanwhile (see visibility.go). Nil: no extension.
	Visibility *Visibility
}

// Handle is the Lambda handler. It never returns an error (which would fail the whole batch): it
// names exactly the messages that must come back.
//
//   - a message that does not decode (malformed, corrupted) fails, every time, so the queue moves it
//     to the dead-letter queue after its receive limit; it never holds up the rest of the batch;
//   - an event this call processed, or that was processed before (a duplicate or redelivered
//     message), succeeds: one effect, every delivery acknowledged;
//   - an event another worker holds right now fails, so its message comes back after the visibility
//     timeout and finds it processed (or, if that worker rolled back, processes it);
//   - an id that names no event fails (it ends in the dead-letter queue, where someone can look);
//   - a message naming several events ({"ids": [...]}) succeeds only when every one of them does;
//   - if the database transaction fails, every message fails: nothing was committed.
func (p *Processor) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	newValue := p.NewValue
	if newValue == nil {
		newValue = func(int64) string { return exactlyonce.NewValue() }
	}

	var resp events.SQSEventResponse
	fail := func(messageID string) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: messageID})
	}
	if p.Visibility != nil && len(ev.Records) > 0 {
		var wg sync.WaitGroup
		stop := p.Visibility.keep(ctx, ev.Records, log, &wg)
		defer wg.Wait() // no extension outlives the handler: the mapping deletes next
		defer stop()
	}

	idsOf := make(map[string][]int64, len(ev.Records))
	ids := make([]int64, 0, len(ev.Records))
	malformed := 0
	for _, r := range ev.Records {
		named, err := queue.Decode(r.Body)
		if err != nil {
			malformed++
			log.Warn("processor: malformed message", "messageId", r.MessageId,
				"receiveCount", r.Attributes["ApproximateReceiveCount"], "err", err)
			fail(r.MessageId)
			continue
		}
		idsOf[r.MessageId] = named
		ids = append(ids, named...)
	}

	outcomes, err := p.Store.ProcessIDs(ctx, ids, exactlyonce.ByProcessor, newValue)
	if err != nil {
		log.Error("processor: processing transaction failed; the batch will be retried",
			"messages", len(idsOf), "events", len(ids), "err", err)
	}
	counts := map[exactlyonce.Outcome]int{}
	for _, o := range outcomes {
		counts[o]++
	}
	// A message succeeds when every event it names is settled; otherwise it comes back, and the
	// events it names that were settled meanwhile are acknowledged as already processed.
	for _, r := range ev.Records {
		named, ok := idsOf[r.MessageId]
		if !ok {
			continue // already failed as malformed
		}
		if err != nil {
			fail(r.MessageId)
			continue
		}
		for _, id := range named {
			o := outcomes[id]
			if o == exactlyonce.OutcomeSettled || o == exactlyonce.OutcomeAlreadySettled {
				continue
			}
			if o == exactlyonce.OutcomeMissing {
				log.Warn("processor: message names no event", "messageId", r.MessageId, "id", id)
			}
			fail(r.MessageId) // Unknown, or Busy: another worker holds the event
			break
		}
	}
	log.Info("processor: batch done", "messages", len(ev.Records), "events", len(outcomes),
		"processed", counts[exactlyonce.OutcomeSettled], "alreadyProcessed", counts[exactlyonce.OutcomeAlreadySettled],
		"busy", counts[exactlyonce.OutcomeBusy], "unknown", counts[exactlyonce.OutcomeMissing], "malformed", malformed,
		"failed", len(resp.BatchItemFailures))
	return resp, nil
}
