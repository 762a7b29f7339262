package sweeping

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// ShardInput is the scheduled sweeper's input: which of the Shards static shards this invocation
// runs. The stack's rules pass it as their constant input ({"shard": i}), one rule per shard;
// without it (the default scheduled event, `make invoke`) the invocation runs shard 0.
type ShardInput struct {
	Shard *int `json:"shard"`
}

// DefaultAgentStopBefore is how long before the invocation's deadline a scheduled sweeper agent
// stops starting batches: enough for the batch under way, its leaving and its metrics.
const DefaultAgentStopBefore = 8 * time.Second

// HandleAgent is the scheduled Lambda handler when the sweepers are agents: the invocation is an
// agent for its whole duration, with the static shard its input names (of Config.Shards), and it
// hands over to the next tick's invocation: it runs until StopBefore (at least
// DefaultAgentStopBefore) ahead of its deadline, then leaves, and the next invocation, which
// started before and waited (Handover), takes the shard at its next pulse. Should an invocation
// die, its row expires and the next one ejects it: a shard is never left uncovered for longer than
// one expiration, and never held by two RUNNING agents.
func (s *Sweeper) HandleAgent(ctx context.Context, in ShardInput) (Result, error) {
	ctx = metrics.With(ctx, s.recorder(ctx))
	start := time.Now()
	res, err := s.runAgent(ctx, in)
	s.publish(ctx, res, err)
	if err != nil {
		s.cfg.Logger.Error("sweeper: agent failed", "processed", res.Processed, "err", err)
		return res, err
	}
	// An idle invocation is the common case (every minute on AWS, on every shard): it is said at
	// debug level, so that the info log holds only the invocations that did something.
	level := slog.LevelDebug
	if res.Processed > 0 || res.Retrying > 0 || res.Failed > 0 || res.PulseFailures > 0 {
		level = slog.LevelInfo
	}
	s.cfg.Logger.Log(ctx, level, "sweeper: agent done", "processed", res.Processed, "retrying", res.Retrying,
		"failed", res.Failed, "batches", res.Batches, "folded", res.Folded, "pulseFailures", res.PulseFailures,
		"ms", time.Since(start).Milliseconds())
	return res, nil
}

func (s *Sweeper) runAgent(ctx context.Context, in ShardInput) (Result, error) {
	shards := cmp.Or(s.cfg.Shards, 1)
	index := 0
	if in.Shard != nil {
		index = *in.Shard
	}
	if index < 0 || index >= shards {
		return Result{}, fmt.Errorf("sweeper: shard %d of %d (SWEEPER_SHARDS): the input's shard must be from 0 to %d", index, shards, shards-1)
	}
	ac := s.cfg.Agent
	ac.Member.Static = &agents.Shard{Total: shards, Index: index}
	ac.Member.Handover = true
	ac.Member.Kind = "sweeper"
	if ac.Member.Name == "" {
		ac.Member.Name = fmt.Sprintf("sweeper-%d-of-%d", index, shards)
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			ac.Member.Name += "-" + lc.AwsRequestID
		}
	}
	ac.BatchSize = cmp.Or(ac.BatchSize, s.cfg.BatchSize)
	foldedBefore := s.folded.Load()
	// The invocation's own agent and, when it delivers tasks, its own EventService: at its deadline
	// its event workers are marked willTerminate, and the next invocation's agent adopts those that
	// still hold tasks.
	a, err := s.Agent(ac, exactlyonce.BySweeper)
	if err != nil {
		return Result{}, err
	}
	stop := ctx
	if dl, ok := ctx.Deadline(); ok {
		end := dl.Add(-cmp.Or(s.cfg.AgentStopBefore, DefaultAgentStopBefore))
		if time.Until(end) <= 0 {
			// Too short an invocation to join and leave in: it does nothing.
			return Result{Stopped: true}, nil
		}
		var cancel context.CancelFunc
		stop, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	_ = a.RunUntil(ctx, stop)
	res := Result{Processed: int(a.Totals.Settled.Load()), Retrying: int(a.Totals.Retrying.Load()),
		Failed: int(a.Totals.GaveUp.Load()), Batches: int(a.Totals.Batches.Load()), Stopped: true,
		PulseFailures: int(a.Member.Stats.PulseFailures.Load()), Folded: s.folded.Load() - foldedBefore}
	if a.Member.Stats.Pulses.Load() == 0 {
		return res, fmt.Errorf("sweeper: shard %d of %d: no pulse succeeded in the whole invocation", index, shards)
	}
	return res, nil
}
