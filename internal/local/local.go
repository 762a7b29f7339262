// Package local runs the whole system in one process, with the same handlers the Lambdas run: the
// API as a plain HTTP server, the processor behind a local stand-in for the SQS event source
// mapping, and the sweeper as an agent (internal/agents): it registers, pulses and processes the
// due events of its hash range, sharing them with any standalone agent (`make agent`) on the same
// database.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/console"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/metrics/prom"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// Options configures a local run. Zero values take the defaults shown; Env builds Options from the
// environment's configuration (the variables named here).
type Options struct {
	// HTTPAddr is where the API listens (HTTP_ADDR). Default 127.0.0.1:8080; port 0 picks one.
	HTTPAddr string
	// Queues are the queue and DLQ the API sends to and the mapping polls.
	Queues queue.Queues
	// MappingConcurrency is MAPPING_CONCURRENCY, as config reads it: the pollers of the local event
	// source mapping, nil for mapping.Config's default; 0 runs no queue consumer at all, and every
	// async event is left to the agents, for demos and tests of them.
	MappingConcurrency *int
	// MappingBatchSize is MAPPING_BATCH_SIZE (default: mapping.Config's).
	MappingBatchSize int
	// ProcessorTimeout is each processor invocation's deadline (PROCESSOR_TIMEOUT; default:
	// mapping.Config.Timeout's).
	ProcessorTimeout time.Duration
	// SweepInterval is how long the sweeper's agent waits when nothing is due (SWEEP_INTERVAL, or
	// AGENT_POLL_INTERVAL; default: agents.DefaultPollInterval), plus up to half of it.
	SweepInterval time.Duration
	// Engine is the engine options of the run's processor and sweeper agent (processing.Engine:
	// Works, Lease, Backoff, Report, Tasks; the stores, By and Workers are each path's).
	Engine processing.Engine
	// Sweep configures the sweeper agent (SWEEP_GRACE, as config reads it; WORKER_*);
	// SWEEP_BATCH_SIZE is its batch when AGENT_BATCH_SIZE is unset. Its Engine is Engine: Start sets
	// it. Its Logger defaults to Start's.
	Sweep sweeping.Config
	// Agent configures the sweeper's membership (AGENT_*, SHARDS_*; defaults: agents'); its name
	// defaults to "local-<pid>-<host>".
	Agent agents.Config
	// VisibilityHeartbeat and VisibilityExtension shape the processor's visibility extension
	// (VISIBILITY_HEARTBEAT, VISIBILITY_EXTENSION; defaults: sqsbatch.Visibility's).
	VisibilityHeartbeat, VisibilityExtension time.Duration
	// AsyncLinger is ASYNC_LINGER, as config reads it (api.AsyncGroup.Linger; nil:
	// wire.DefaultAsyncLinger): POST /events/async answers once the event is committed, and a
	// message names the events committed within about this long. Zero: answer after the message is
	// sent, as a Lambda does.
	AsyncLinger *time.Duration
	// Idempotency configures the Idempotency-Key header (IDEMPOTENCY_TTL, IDEMPOTENCY_WAIT,
	// IDEMPOTENCY_REQUIRED; defaults: api.Idempotency's). Locally every caller has one scope.
	Idempotency api.Idempotency
	// WrapAPI, when set, wraps the API's handler where the HTTP server and the console both call
	// it: the tests check every exchange against the API's OpenAPI document with it
	// (internal/openapitest).
	WrapAPI func(http.Handler) http.Handler
	// Webhook is the deliveries' address rule the API applies to a task's url at create
	// (WEBHOOK_ALLOW_LOOPBACK, WEBHOOK_ALLOW_PRIVATE: the same settings as Sweep.Tasks's deliverer).
	Webhook webhook.Policy
	// Counters, when set, runs the counter service's consumer (counters.go).
	Counters *Counters
	// IdleTimeout closes the API's (and console's) and the metrics endpoint's keep-alive
	// connections idle this long (default httpserver.IdleTimeout).
	IdleTimeout time.Duration
	// MetricsAddr is where the parts' Prometheus metrics are served, on /metrics (METRICS_ADDR;
	// cmd/local's default 127.0.0.1:9464; port 0 picks one). Empty: not served (System.Metrics
	// still counts them).
	MetricsAddr string
	// Listener and MetricsListener, when set, are where the API and the metrics are served instead
	// of HTTPAddr and MetricsAddr: Run takes its ports (Listen) before it touches the database or
	// the queues. Start owns them from then on.
	Listener, MetricsListener net.Listener
}

// System is a running local system.
type System struct {
	// URL is the API's base URL.
	URL string
	// ConsoleURL is the operators' console's, URL + "/ui/".
	ConsoleURL string
	// MetricsURL is the URL of the /metrics endpoint; empty when Options.MetricsAddr is.
	MetricsURL string
	// Metrics is the registry every part records in (label part: api, processor, sweeper, counter).
	Metrics *prom.Registry
	done    chan error
	mapping *mapping.Mapping
}

// MappingStats returns what the local event source mapping has done so far (nothing if it is off).
func (s *System) MappingStats() (batches, received, deleted, failed, errored int64) {
	if s.mapping == nil {
		return 0, 0, 0, 0, 0
	}
	return s.mapping.Stats.Snapshot()
}

// Wait blocks until the system has stopped after its context was cancelled.
func (s *System) Wait() error { return <-s.done }

// Start starts every part and returns once the API is listening. Cancel ctx to stop them all, in
// order: the API stops taking requests, answers those under way and sends the queue messages it
// holds; then the processor, the counter consumer and the sweeper finish their batches (deleting
// their messages) and their agents leave; then the metrics endpoint closes. Wait returns when they
// have stopped; the queue endpoint and the database must outlive that.
func Start(ctx context.Context, stores *wire.Stores, client *sqs.Client, opt Options, log *slog.Logger) (*System, error) {
	linger := wire.AsyncLinger(opt.AsyncLinger)
	opt.Sweep.Logger = cmp.Or(opt.Sweep.Logger, log)
	opt.Engine.Logger = cmp.Or(opt.Engine.Logger, log)
	opt.Sweep.Engine = opt.Engine

	reg := prom.New()
	opt.Sweep.Metrics.Recorder = reg.Recorder(metrics.PartSweeper)
	ln, mln := opt.Listener, opt.MetricsListener
	if ln == nil {
		var err error
		if ln, mln, err = Listen(opt); err != nil {
			return nil, err
		}
	}
	// One process serving many requests: the API groups the async events of concurrent requests
	// into one INSERT, and sends messages naming many events (api.AsyncGroup); a Lambda serves one
	// request at a time, and answers after its message is sent.
	handler := &api.Server{Stores: stores.API(), Queue: &queue.SQSSender{Client: client, QueueURL: opt.Queues.URL}, Logger: log,
		AsyncGroup: api.AsyncGroup{Linger: linger}, Idempotency: opt.Idempotency, Webhook: opt.Webhook,
		Metrics: reg.Recorder(metrics.PartAPI)}
	var apiHandler http.Handler = handler
	if opt.WrapAPI != nil {
		apiHandler = opt.WrapAPI(handler)
	}
	ui, err := localConsole(apiHandler, client, reg, ln.Addr().String(), opt, log)
	if err != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
		return nil, err
	}
	server := newServer(withConsole(apiHandler, ui, ln.Addr().String()), opt)
	consume := opt.MappingConcurrency == nil || *opt.MappingConcurrency > 0
	pollers := mapping.DefaultConcurrency
	if consume && opt.MappingConcurrency != nil {
		pollers = *opt.MappingConcurrency
	}
	processor, err := newProcessors(pollers, stores, opt, processorName(opt.Agent.Member.Name), reg.Recorder(metrics.PartProcessor),
		&sqsbatch.Visibility{Client: client, QueueURL: opt.Queues.URL, Heartbeat: opt.VisibilityHeartbeat, Extension: opt.VisibilityExtension}, log)
	if err != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
		return nil, err
	}
	var m *mapping.Mapping
	if consume {
		m = mapping.New(client, processor.Handle, mapping.Config{
			QueueURL: opt.Queues.URL, QueueARN: opt.Queues.ARN,
			BatchSize: opt.MappingBatchSize, Concurrency: pollers,
			Timeout: opt.ProcessorTimeout, Logger: log,
		})
	}
	counterMapping := startCounters(stores, client, &opt, reg.Recorder(metrics.PartCounter), log) // counters.go; sets opt.Sweep.Counters
	sweeper, err := sweeperAgent(stores, opt, log)
	if err != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
		return nil, err
	}

	sys := &System{URL: "http://" + ln.Addr().String(), done: make(chan error, 1), mapping: m, Metrics: reg}
	sys.ConsoleURL = sys.URL + "/ui/"
	var metricsServer *http.Server
	if mln != nil {
		sys.MetricsURL = "http://" + mln.Addr().String() + "/metrics"
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", reg.Handler())
		metricsServer = newServer(mux, opt)
		log.Info("local: metrics served", "url", sys.MetricsURL)
	}
	log.Info("local: api listening", "url", sys.URL, "async_linger", linger.String())
	log.Info("local: console: "+sys.ConsoleURL, "url", sys.ConsoleURL)
	if m != nil {
		log.Info("local: processor polling", "queue", opt.Queues.URL, "dlq", opt.Queues.DLQURL,
			"concurrency", m.Config().Concurrency)
	} else {
		log.Info("local: no queue consumer (MAPPING_CONCURRENCY=0): every async event is left to the agents",
			"queue", opt.Queues.URL)
	}
	log.Info("local: sweeper running as an agent", "name", sweeper.Member.Config().Name)

	// serving: the API's and the metrics' servers; parts: what works behind the API, on work, which
	// ends only once the API has stopped (Start's doc gives the order).
	var serving, parts sync.WaitGroup
	errs := make(chan error, 2)
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	if metricsServer != nil {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := metricsServer.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	serving.Add(1)
	go func() {
		defer serving.Done()
		if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("api: %w", err)
		}
	}()
	parts.Add(1)
	go func() {
		defer parts.Done()
		if m != nil {
			_ = m.Run(work) // a batch under way finishes, and its messages are deleted
		}
		// Their event workers stop and their agents leave: the sweeper adopts what they still hold.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := processor.Close(cctx); err != nil {
			log.Warn("local: the processor could not leave; its event workers are adopted once its agent expires", "err", err)
		}
	}()
	runCounters(work, &parts, counterMapping) // counters.go
	parts.Add(1)
	go func() {
		defer parts.Done()
		// What the agent records (its pulses, claims, transactions) goes to the sweeper's series.
		_ = sweeper.Run(metrics.With(work, opt.Sweep.Metrics.Recorder)) // leaves (deletes its row) when work ends
	}()
	go func() {
		<-ctx.Done()
		log.Info("local: stopping")
		// 1. The API: no new request; those under way are answered, and the messages still held for
		// their events are sent (the queue endpoint is still up: scripts/run.sh stops it after us).
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = server.Shutdown(sctx)
		if err := handler.Drain(sctx); err != nil {
			log.Warn("local: queue messages not sent before stopping; the sweeper will process their events", "err", err)
		}
		cancel()
		log.Info("local: api stopped")
		// 2. The processor, the counter consumer and the sweeper.
		stopWork()
		parts.Wait()
		log.Info("local: processor, counter consumer and sweeper stopped")
		// 3. The metrics, last, so that they count everything.
		if metricsServer != nil {
			mctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = metricsServer.Shutdown(mctx)
			cancel()
		}
		serving.Wait()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		sys.done <- errors.Join(all...)
	}()
	return sys, nil
}

// newServer is an HTTP server of the run for h, with the project's timeouts (httpserver) and
// opt.IdleTimeout when set.
func newServer(h http.Handler, opt Options) *http.Server {
	srv := httpserver.New(h)
	if opt.IdleTimeout > 0 {
		srv.IdleTimeout = opt.IdleTimeout
	}
	return srv
}

// localConsole is the operators' console of a local run (internal/console), served beside the API
// on its address: it calls the API's handler in-process, shows the events queue and the counter
// service's queue, each with its DLQ, which it can redrive, and the rates of processing by path
// from the parts' metrics in reg (localRates).
func localConsole(api http.Handler, client *sqs.Client, reg *prom.Registry, addr string, opt Options, log *slog.Logger) (http.Handler, error) {
	queues := []string{opt.Queues.URL}
	if opt.Counters != nil {
		queues = append(queues, opt.Counters.Queues.URL)
	}
	return console.New(console.Options{API: api, APIURL: "http://" + addr, Addr: addr, SQS: client, Queues: queues,
		Rates: localRates(reg), Logger: log})
}

// localRates is the console's source of rates in a local run: the totals of the counters this
// process's parts record, EventsCreatedSync of the api (a sync create is processed at birth) and
// EventsProcessed of the processor and the sweeper. A standalone agent (`make agent`) counts in its
// own process: its path is not measured here.
func localRates(reg *prom.Registry) *console.CounterRates {
	return console.NewCounterRates("local", func() map[string]float64 {
		return map[string]float64{
			console.PathAPI:       reg.Total(metrics.EventsCreatedSync, metrics.PartAPI),
			console.PathProcessor: reg.Total(metrics.EventsProcessed, metrics.PartProcessor),
			console.PathSweeper:   reg.Total(metrics.EventsProcessed, metrics.PartSweeper),
		}
	}, console.PathAgent)
}

// withConsole sends /ui and everything under /ui/ to the console, and every other request to the API.
// The API has no authorisation of its own locally (on AWS, IAM's), so a browser's request to it is
// refused unless it is the browser's own doing on this address (browserAllowed): with the console on
// the same port, a page the operator visits elsewhere must not reach the API behind its back.
func withConsole(api, ui http.Handler, addr string) http.Handler {
	_, port, _ := net.SplitHostPort(addr)
	hosts := map[string]bool{strings.ToLower(addr): true, "localhost:" + port: true, "127.0.0.1:" + port: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			ui.ServeHTTP(w, r)
			return
		}
		if !browserAllowed(r, hosts) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"refused: a browser request from another site or host name; the local API answers programs, and browsers on its own address"}` + "\n"))
			return
		}
		api.ServeHTTP(w, r)
	})
}

// browserAllowed tells whether a request may reach the local API. A request that carries no
// Sec-Fetch-Site (curl, the SDKs, the tests) is a program's, and passes. A browser's passes when it
// is typed or bookmarked (none) or comes from this origin (same-origin), on one of the listener's own
// host names: a cross-site page (a simple POST needs no CORS preflight) and a DNS-rebinding page
// (same-origin to the browser, but under another Host) are refused.
func browserAllowed(r *http.Request, hosts map[string]bool) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site == "" && r.Header.Get("Origin") == "" {
		return true
	}
	if site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" && !strings.EqualFold(origin, "http://"+r.Host) {
		return false
	}
	return hosts[strings.ToLower(r.Host)]
}

// processorName is the local processor's agent name: AGENT_NAME's (the sweeper's) with
// "-processor", or processor-<pid>-<host>.
func processorName(name string) string {
	if name != "" {
		return name + "-processor"
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("processor-%d-%s", os.Getpid(), host)
}

// sweeperAgent returns the local sweeper: an agent of kind "sweeper" (wire.Agent), named
// local-<pid>-<host> unless AGENT_NAME names it, with the sweeper's engine, grace, event workers
// and maintenance (the fold of the count, pruning expired keys, the counter service's sweep); its
// batch is AGENT_BATCH_SIZE, else SWEEP_BATCH_SIZE, else the agents' default, and its pause
// AGENT_POLL_INTERVAL, else SWEEP_INTERVAL.
func sweeperAgent(stores *wire.Stores, opt Options, log *slog.Logger) (*agents.Agent, error) {
	ac := opt.Agent
	if ac.Member.Name == "" {
		host, _ := os.Hostname()
		ac.Member.Name = fmt.Sprintf("local-%d-%s", os.Getpid(), host)
	}
	ac.Member.Kind = "sweeper"
	ac.Member.Logger = cmp.Or(ac.Member.Logger, log)
	ac.BatchSize = cmp.Or(ac.BatchSize, opt.Sweep.BatchSize)
	ac.PollInterval = cmp.Or(ac.PollInterval, opt.SweepInterval)
	ac.PollJitter = cmp.Or(ac.PollJitter, ac.PollInterval/2)
	return wire.Agent(stores, opt.Sweep, ac, exactlyonce.BySweeper)
}

// Env returns the Options the configuration asks for (config.Config.Local, the sweeper's and the
// processor's variables), as config.Load read them from the environment: zero for what the
// environment leaves unset, so that Start and the components apply their defaults. Queues is left
// to the caller.
func Env(c config.Config) Options {
	o := Options{
		HTTPAddr:            c.Local.HTTPAddr,
		MappingConcurrency:  c.Local.MappingConcurrency,
		MappingBatchSize:    c.Local.MappingBatchSize,
		AsyncLinger:         c.Local.AsyncLinger,
		ProcessorTimeout:    c.Local.ProcessorTimeout,
		SweepInterval:       c.Local.SweepInterval,
		Sweep:               wire.Sweeping(c, nil),
		VisibilityHeartbeat: c.Processor.VisibilityHeartbeat,
		VisibilityExtension: c.Processor.VisibilityExtension,
		Idempotency: api.Idempotency{TTL: c.Idempotency.TTL, Wait: c.Idempotency.Wait,
			Required: c.Idempotency.Required},
		Agent:       wire.AgentVars(c.Agent),
		MetricsAddr: c.MetricsAddr,
		Webhook:     wire.WebhookPolicy(c),
	}
	return o
}
