package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// processors stands in for the processor Lambda's execution environments: one processor per
// poller of the local event source mapping, each handling one batch at a time, as an environment
// does. When tasks are delivered, each has its own EventService under its own agent without a
// range, as each environment registers its own: the pollers' batches neither wait for one
// service's assignments nor settle into the same event worker rows.
type processors struct {
	all  []*processing.Processor
	free chan *processing.Processor
}

// newProcessors returns n processors (wire.Processor) with the run's engine options, recording in
// rec, extending their messages' visibility with vis; with tasks, each with its event workers, its
// agent named name-<i>.
func newProcessors(n int, stores *wire.Stores, opt Options, name string, rec *metrics.Recorder, vis *sqsbatch.Visibility,
	log *slog.Logger) (*processors, error) {
	ps := &processors{free: make(chan *processing.Processor, n)}
	for i := range n {
		mc := opt.Agent.Member
		mc.Name = fmt.Sprintf("%s-%d", name, i)
		mc.Static, mc.Handover, mc.Logger = nil, false, log
		p, err := wire.Processor(stores, opt.Engine, vis, &wire.EventWorkers{Member: mc,
			MaxReferences: opt.Sweep.WorkerMaxReferences, Retention: opt.Sweep.WorkerRetention})
		if err != nil {
			return nil, err
		}
		p.Metrics = rec
		ps.all = append(ps.all, p)
		ps.free <- p
	}
	return ps, nil
}

// Handle hands the batch to a free processor (the mapping runs at most n batches at once).
func (ps *processors) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var p *processing.Processor
	select {
	case p = <-ps.free:
	case <-ctx.Done():
		return events.SQSEventResponse{}, ctx.Err()
	}
	defer func() { ps.free <- p }()
	return p.Handle(ctx, ev)
}

// Close stops every processor's event workers and their agents leave.
func (ps *processors) Close(ctx context.Context) error {
	var errs []error
	for _, p := range ps.all {
		errs = append(errs, p.Close(ctx))
	}
	return errors.Join(errs...)
}
