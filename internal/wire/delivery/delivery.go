// Package delivery builds what delivers tasks: the webhook client signed with WEBHOOK_SECRET, or with
// the secret WEBHOOK_SECRET_ARN names (read from Secrets Manager, internal/secrets), and the
// assemblies that deliver (the scheduled sweeper's configuration, the standalone agents). It is apart
// from internal/wire so that a bootstrap that delivers no task (the api and counter functions) does
// not link the Secrets Manager client: every package a bootstrap links is initialised at each cold
// start, and that client's took 0.15-0.25 ms of the api's (docs/performance.md, "Lambda start-up";
// the functions' linked-packages test, internal/wire/boot).
package delivery

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/secrets"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// webhookSecrets reads WEBHOOK_SECRET_ARN's secret once per process, with a client built from the
// process's AWS configuration (wire.AWS), the one every other client of the process shares.
var webhookSecrets = secrets.Cache{Config: wire.AWS}

// Tasks returns how this process delivers tasks: the webhook client, signed with WEBHOOK_SECRET or
// with the secret WEBHOOK_SECRET_ARN names (read from Secrets Manager once), and the retry and
// timeout settings. With neither variable set it returns nil and logs a warning: the process then
// claims no task, and tasks wait for a process that can sign them.
func Tasks(ctx context.Context, c config.Config, log *slog.Logger) (*processing.Tasks, error) {
	w := c.Webhook
	secret := w.Secret
	if w.SecretARN != "" {
		var err error
		if secret, err = webhookSecrets.Resolve(ctx, w.SecretARN); err != nil {
			return nil, fmt.Errorf("WEBHOOK_SECRET_ARN: %w", err)
		}
	}
	if secret == "" {
		log.Warn("neither WEBHOOK_SECRET nor WEBHOOK_SECRET_ARN is set: this process delivers no task")
		return nil, nil
	}
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook signing secret: %w", err)
	}
	if w.AllowLoopback {
		log.Warn("WEBHOOK_ALLOW_LOOPBACK=true: tasks may be delivered to 127.0.0.0/8 and ::1 (local runs only)")
	}
	p := wire.WebhookPolicy(c)
	client := webhook.New(webhook.Config{Key: key, Timeout: w.Timeout, AllowLoopback: p.AllowLoopback,
		AllowPrivate: p.AllowPrivate, LambdaRuntimeAPI: p.LambdaRuntimeAPI, OwnHosts: p.OwnHosts})
	return &processing.Tasks{Deliverer: client, RetryBase: w.RetryBase, RetryMax: w.RetryMax, Timeout: w.Timeout}, nil
}

// SweeperConfig is wire.Sweeping with what a sweeper reads at start-up besides: its task deliveries
// (Tasks: the signing secret) and the counter service's sweep, publishing with wire.CounterPublisher.
func SweeperConfig(ctx context.Context, c config.Config, log *slog.Logger) (sweeping.Config, error) {
	sc := wire.Sweeping(c, log)
	var err error
	if sc.Engine.Tasks, err = Tasks(ctx, c, log); err != nil {
		return sc, err
	}
	if sc.Counters, err = wire.CounterSweep(c.Counter, log); err != nil {
		return sc, err
	}
	return sc, nil
}

// StandaloneAgents returns the standalone agent process's agents (cmd/agent): one per shard
// SHARDS_ASSIGNED lists, or the one dynamic agent (wire.AgentConfigs, kind "standalone"), processing
// as ByAgent, each with the sweeper's maintenance between its batches (one sweeper for the process:
// the maintenance runs at most once per MaintainEvery in it), delivering tasks when a signing secret
// is set (Tasks).
func StandaloneAgents(ctx context.Context, c config.Config, stores *wire.Stores, log *slog.Logger) ([]*agents.Agent, error) {
	sc := wire.Sweeping(c, log)
	var err error
	if sc.Engine.Tasks, err = Tasks(ctx, c, log); err != nil {
		return nil, err
	}
	s := sweeping.New(stores.Sweeping(), sc)
	var out []*agents.Agent
	for _, ac := range wire.AgentConfigs(c, "standalone", log) {
		a, err := s.Agent(ac, exactlyonce.ByAgent)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
