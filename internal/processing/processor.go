package processing

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
)

// Processor is the SQS-triggered processor: it settles the events its messages name, exactly once,
// and tells the queue which messages failed so that only those are delivered again.
type Processor struct {
	// Engine is how the processor claims, works and settles, declared once for every path: its
	// stores (Store; TaskStore, required with Tasks), the works (default
	// exactlyonce.DefaultWorks()), the lease, the backoff, the report (the exactly-once checker's),
	// the logger and the task deliveries (Tasks). The processor sets its By (ByProcessor) and its
	// Workers (the processor's own, below).
	Engine Engine
	// Visibility, when set, keeps a batch's messages invisible for as long as the batch is being
	// processed. Nil: no extension.
	Visibility *sqsbatch.Visibility
	// Workers, when set with Agent, packs the tasks the processor delivers into event workers
	// (EventService), as the agents do: a reference's tasks have one owner at a time whichever path
	// found them. Its AgentID is Agent's.
	Workers *EventService
	// Agent is the processor's registration as an agent without a range (agents.Rangeless): held
	// for every batch, so that its event workers are not adopted while it delivers, and gone when
	// it stops pulsing, so that they are.
	Agent Membership
	// Metrics, when set, records the batches' metrics (claims, outcomes, the store's transactions);
	// nil: the Recorder the context carries, if any (the Lambda's, wire.Invocation).
	Metrics *metrics.Recorder
}

// Membership is a processor's registration as an agent (agents.Rangeless).
type Membership interface {
	// Hold registers or pulses the agent as needed and keeps it alive until release is called.
	Hold(ctx context.Context) (release func(), err error)
	// Leave deletes the agent's row.
	Leave(ctx context.Context) error
}

// Close is a processor process stopping (SIGTERM, the end of a local run): its event workers are
// marked willTerminate, those with nothing left done, and its agent leaves, so that the agents
// adopt what the workers still hold at their next pulse. A Lambda's processor is never closed: its
// container is frozen, then reclaimed, and its agent expires.
func (p *Processor) Close(ctx context.Context) error {
	if p.Workers == nil || p.Agent == nil {
		return nil
	}
	if err := p.Workers.Stop(ctx); err != nil {
		return fmt.Errorf("processor: stop its event workers: %w", err)
	}
	return p.Agent.Leave(ctx)
}

// Handle is the Lambda handler. It never returns an error (which would fail the whole batch): it
// names exactly the messages that must come back.
//
//   - a message that does not decode (malformed, corrupted) fails, every time, so the queue moves it
//     to the dead-letter queue after its receive limit; it never holds up the rest of the batch;
//   - an event this call settled, or that was settled before (a duplicate or redelivered message),
//     succeeds: one effect, every delivery acknowledged;
//   - an event another claim holds right now (its row lock or its lease) fails, so its message
//     comes back after the visibility timeout and finds it settled (or, if that claim rolled back
//     or died, claims it);
//   - an event whose work failed this time fails (it waits its backoff); one whose work failed for
//     the last allowed time is settled as failed, with its error, and its message succeeds;
//   - an id beyond the id counter fails (no event has it: it ends in the dead-letter queue, where
//     someone can look); an id at or below it that names no open event is taken for settled
//     (Store.Outcomes reads no history), so one no event took (a block's unused id, an agent's)
//     succeeds: it names nothing to process;
//   - a message naming several events ({"ids": [...]}) succeeds only when every one of them does;
//   - if the claim's transaction fails, every message fails: nothing was committed (or, if only
//     the commit's answer was lost, the messages come back and find their events settled).
func (p *Processor) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	if p.Metrics != nil {
		ctx = metrics.With(ctx, p.Metrics)
	}
	h := sqsbatch.Handler[[]int64]{Name: exactlyonce.ByProcessor, Decode: queue.Decode, Work: p.work,
		Visibility: p.Visibility, Logger: p.logger()}
	return h.Handle(ctx, ev)
}

func (p *Processor) logger() *slog.Logger { return p.Engine.logger() }

// work processes every event the batch's messages name, in one claim, and returns the messages
// that must come back: those naming an event that is not settled.
func (p *Processor) work(ctx context.Context, msgs []sqsbatch.Message[[]int64]) ([]string, error) {
	var ids []int64
	for _, m := range msgs {
		ids = append(ids, m.Body...)
	}
	engine := p.Engine
	engine.By, engine.Workers = exactlyonce.ByProcessor, nil
	if p.Workers != nil && p.Agent != nil {
		// Alive as an agent for the whole batch: its event workers are its own while it delivers.
		release, err := p.Agent.Hold(ctx)
		if err != nil {
			return nil, fmt.Errorf("processor: its agent could not pulse, so it delivers nothing: %w", err)
		}
		defer release()
		engine.Workers = p.Workers
	}
	outcomes, err := engine.ProcessIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	counts := map[exactlyonce.Outcome]int{}
	for _, o := range outcomes {
		counts[o]++
	}
	// A message succeeds when every event it names is settled; otherwise it comes back, and the
	// events it names that were settled meanwhile are acknowledged as already settled.
	var failed []string
	for _, m := range msgs {
		for _, id := range m.Body {
			o := outcomes[id]
			if o == exactlyonce.OutcomeSettled || o == exactlyonce.OutcomeAlreadySettled || o == exactlyonce.OutcomeFailed {
				continue // settled: processed, or failed for good (its error is on the event)
			}
			if o == exactlyonce.OutcomeDeferred {
				continue // a task the database brings back by itself: queued, or waiting its backoff
			}
			if o == exactlyonce.OutcomeMissing {
				p.logger().Warn("processor: message names no event", "messageId", m.ID, "id", id)
			}
			failed = append(failed, m.ID) // missing, or busy: another claim holds the event
			break
		}
	}
	p.logger().Info("processor: batch done", "messages", len(msgs), "events", len(outcomes),
		"settled", counts[exactlyonce.OutcomeSettled], "alreadySettled", counts[exactlyonce.OutcomeAlreadySettled],
		"busy", counts[exactlyonce.OutcomeBusy], "deferred", counts[exactlyonce.OutcomeDeferred], "missing", counts[exactlyonce.OutcomeMissing],
		"gaveUp", counts[exactlyonce.OutcomeFailed], "messagesFailed", len(failed))
	return failed, nil
}
