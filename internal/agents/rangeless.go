package agents

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/processing"
)

// Rangeless is the membership of a process that searches for nothing but delivers tasks through
// event workers of its own: the processor, which delivers what its queue messages name. It
// registers as an agent without a range (exactlyonce.ShardingNone, RUNNING, no shard): its row
// says the process is alive, so that no agent adopts its event workers while it runs, and it goes
// once the process stops pulsing (SIGKILL, or a Lambda container frozen between invocations,
// then reclaimed), so that the agents whose ranges hold its workers' first references adopt
// them. The agents that split the hash space leave it out of their topology (Member.Pulse).
//
// It pulses only while a batch is under way (Hold): a process with nothing to do sends nothing,
// and on Lambda nothing runs between invocations anyway. So an idle processor's row expires and is
// ejected, and its next batch registers it again: both sides log that at INFO, as it is how it is
// meant to work; losing the row while a batch holds it is an ERROR. Safe for concurrent use.
type Rangeless struct {
	store Store
	cfg   MemberConfig
	log   *slog.Logger
	// Reset, when set, is called when the process registers under a new id because its old row
	// was ejected: whatever it held under the old id (its event workers) is the adopters' now.
	Reset func()
	Stats Stats

	pmu      sync.Mutex // one pulse or registration at a time: concurrent batches register once
	mu       sync.Mutex
	id       int64
	pulsedAt time.Time
	held     int           // batches under way
	stop     chan struct{} // closed when the last batch under way ends: the background pulse stops
	pulsing  sync.WaitGroup
}

// NewRangeless returns an unregistered range-less member; its first Hold registers it. Static
// sharding and hand-over do not apply to it.
func NewRangeless(store Store, cfg MemberConfig) (*Rangeless, error) {
	cfg.Static, cfg.Handover = nil, false
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Rangeless{store: store, cfg: cfg, log: cfg.Logger}, nil
}

// ID returns the agent's id, 0 while unregistered.
func (r *Rangeless) ID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// Hold makes sure the agent is registered and alive for a batch: it pulses (registering if its
// row is gone) unless it pulsed less than a pulse interval ago, then pulses every pulse interval
// until every batch that holds it has called release. An error (the database unreachable) means
// the agent cannot vouch for its event workers: the caller must not deliver through them.
func (r *Rangeless) Hold(ctx context.Context) (release func(), err error) {
	r.pmu.Lock()
	r.mu.Lock()
	due := r.id == 0 || time.Since(r.pulsedAt) >= r.cfg.PulseInterval
	r.mu.Unlock()
	if due {
		err = r.pulse(ctx)
	}
	r.pmu.Unlock()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held++
	if r.held == 1 {
		r.stop = make(chan struct{})
		r.pulsing.Add(1)
		go r.pulseWhileHeld(context.WithoutCancel(ctx), r.stop)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.held--
			last := r.held == 0
			if last {
				close(r.stop)
			}
			r.mu.Unlock()
			if last {
				r.pulsing.Wait()
			}
		})
	}, nil
}

// pulseWhileHeld pulses every pulse interval until stop is closed: a long batch (slow webhooks)
// must not let the agent expire while its event workers deliver.
//
// A pulse may take until the agent's lease would run short (its expiration less a pulse interval),
// not just an interval: a database that takes seconds to answer (a failover, a loaded server)
// delays a pulse that would still keep the row, and cutting it at its interval made it fail (and
// warn) for nothing. Closing stop ends a pulse in flight at once, so that a batch's release does
// not wait for it; a pulse ended that way is not a failure.
func (r *Rangeless) pulseWhileHeld(ctx context.Context, stop chan struct{}) {
	defer r.pulsing.Done()
	ctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	go func() {
		select {
		case <-stop:
			cancelAll()
		case <-ctx.Done():
		}
	}()
	budget := r.cfg.Expiration - r.cfg.PulseInterval // at least two intervals (MemberConfig.Validate)
	t := time.NewTicker(r.cfg.PulseInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, budget)
			err := r.Pulse(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				// A warning: the next pulse tries again; a row lost meanwhile is said at ERROR
				// when the processor finds itself ejected while a batch holds it.
				r.log.Warn("agent: pulse failed; the event workers of this processor may be adopted if it keeps failing",
					"agent", r.ID(), "err", err)
			}
		}
	}
}

// Pulse pushes the agent's expiration forward, registering it (RUNNING, no range) if it has no
// row: the first time, or after the others ejected it, when Reset is called first.
func (r *Rangeless) Pulse(ctx context.Context) error {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.pulse(ctx)
}

func (r *Rangeless) pulse(ctx context.Context) error {
	sent := time.Now()
	id := r.ID()
	if id != 0 {
		ok, err := r.store.PulseAgent(ctx, id, r.cfg.Expiration)
		if err != nil {
			return r.failed(ctx, fmt.Errorf("pulse: %w", err))
		}
		if ok {
			r.pulsed(ctx, id, sent)
			return nil
		}
		r.Stats.Ejected.Add(1)
		r.mu.Lock()
		idle := r.held == 0 && sent.Sub(r.pulsedAt) >= r.cfg.Expiration
		r.mu.Unlock()
		if idle {
			// It sends nothing between batches, so its row expires when it idles that long, and an
			// agent ejects it: expected, as for a Lambda between invocations.
			r.log.Info("agent: its row expired while it was idle, and was ejected; its event workers are the adopters' now, "+
				"it registers again as a new agent", "agent", id, "expiration", r.cfg.Expiration)
		} else {
			// Gone while a batch held it (its pulses failed past its expiration), or sooner than it
			// could expire: its event workers were adopted while it delivered.
			r.log.Error("agent: ejected (it had not pulsed within its expiration); its event workers are the adopters' now, "+
				"it registers again as a new agent", "agent", id, "expiration", r.cfg.Expiration)
		}
		if r.Reset != nil {
			r.Reset()
		}
		r.mu.Lock()
		r.id = 0
		r.mu.Unlock()
	}
	a, err := r.store.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: r.cfg.Name, Kind: r.cfg.Kind, Sharding: exactlyonce.ShardingNone},
		r.cfg.Expiration)
	if err != nil {
		return r.failed(ctx, fmt.Errorf("register: %w", err))
	}
	// Registered WAITING, as every agent is; it waits for nobody: RUNNING at once, without a range.
	if _, err := r.store.AssignAgent(ctx, a.ID, exactlyonce.AgentRunning, nil, nil); err != nil {
		return r.failed(ctx, fmt.Errorf("register: %w", err))
	}
	r.Stats.Registrations.Add(1)
	r.log.Info("agent: registered without a range", "agent", a.ID, "name", a.Name, "kind", a.Kind)
	r.mu.Lock()
	r.id = a.ID
	r.mu.Unlock()
	r.pulsed(ctx, a.ID, sent)
	return nil
}

func (r *Rangeless) pulsed(ctx context.Context, id int64, sent time.Time) {
	r.mu.Lock()
	if r.id == id {
		r.pulsedAt = sent
	}
	r.mu.Unlock()
	r.Stats.Pulses.Add(1)
	metrics.From(ctx).Add(metrics.AgentPulses, 1)
}

func (r *Rangeless) failed(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		r.Stats.PulseFailures.Add(1)
		metrics.From(ctx).Add(metrics.PulseFailures, 1)
	}
	return err
}

// Leave deletes the agent's row (a process stopping: SIGTERM), so that the agents adopt what its
// event workers still hold at their next pulse rather than after its expiration. Stop the event
// workers first, while the row still names them.
func (r *Rangeless) Leave(ctx context.Context) error {
	r.mu.Lock()
	id := r.id
	r.id = 0
	r.mu.Unlock()
	if id == 0 {
		return nil
	}
	if err := r.store.RemoveAgent(ctx, id); err != nil {
		return err
	}
	r.log.Info("agent: left", "agent", id)
	return nil
}

// WithEventWorkers gives processor p the EventService w and a range-less membership configured by
// mc (its Kind defaults to "processor"), wired to each other: w's event workers belong to the
// membership's agent, and forgotten when that agent was ejected and registers anew.
func WithEventWorkers(p *processing.Processor, store Store, w *processing.EventService, mc MemberConfig) error {
	if mc.Kind == "" {
		mc.Kind = "processor"
	}
	r, err := NewRangeless(store, mc)
	if err != nil {
		return err
	}
	w.AgentID, r.Reset = r.ID, w.Reset
	p.Workers, p.Agent = w, r
	return nil
}
