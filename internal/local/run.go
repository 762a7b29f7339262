package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
	drv "github.com/go-sql-driver/mysql"
)

// DefaultMetricsAddr is where `make run` serves its Prometheus metrics (/metrics) when METRICS_ADDR
// is unset: 9464, the port OpenTelemetry's Prometheus exporter uses by default.
const DefaultMetricsAddr = "127.0.0.1:9464"

// ownPorts is how a second run beside another gets ports of its own.
const ownPorts = "HTTP_ADDR=127.0.0.1:8082 METRICS_ADDR=127.0.0.1:9465 SQSLOCAL_PORT=4101 S3LOCAL_PORT=4201 S3LOCAL_DIR=build/s3local-2 make run"

// Run is the local runner (cmd/local, which `make run` starts): it reads its configuration with
// getenv (Getenv's reading), logs to stdout, runs the whole system until ctx ends, and stops it.
// It says first which database and which SQS endpoint it uses, and takes the ports it listens on
// before it touches either, so that a port another run holds stops it before it has created or
// migrated a database or created a queue. An error is logged before it is returned.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	return run(ctx, getenv, nil, stdout)
}

// RunEnviron is Run of the process's environment, which also refuses a number, duration or
// true/false variable set to nothing, and a variable of the system's prefixes that no component
// reads (config.LoadEnvironOf): what cmd/local runs.
func RunEnviron(ctx context.Context, stdout io.Writer) error {
	return run(ctx, os.Getenv, os.Environ(), stdout)
}

// run is Run; environ, when not nil, is the environment getenv reads (config.LoadEnvironOf).
func run(ctx context.Context, getenv func(string) string, environ []string, stdout io.Writer) error {
	failed := func(err error) error {
		slog.New(slog.NewJSONHandler(stdout, nil)).Error("startup failed", "err", err)
		return err
	}
	getenv = Getenv(getenv)
	cfg, err := config.LoadEnvironOf(getenv, environ)
	if err != nil {
		return failed(err)
	}
	if n := len(cfg.Agent.ShardsAssigned); n > 1 {
		return failed(fmt.Errorf("SHARDS_ASSIGNED lists %d shards: the local runner runs one sweeper agent; run cmd/agent (make agent) for several", n))
	}
	log := wire.NewLogger(stdout, cfg.LogLevel)
	opt := Env(cfg)
	opt.MetricsAddr = cmp.Or(opt.MetricsAddr, DefaultMetricsAddr) // METRICS_ADDR=off: none
	log.Info("local: starting", Database(cfg.DB), "sqs", SQSEndpoint(getenv))

	// The ports first: nothing is created or migrated for a run that cannot listen.
	if opt.Listener, opt.MetricsListener, err = Listen(opt); err != nil {
		return failed(err)
	}
	var stores *wire.Stores
	defer func() {
		if stores != nil {
			stores.DB.Pool().Close()
		}
	}()
	abort := func(err error) error {
		opt.Listener.Close()
		if opt.MetricsListener != nil {
			opt.MetricsListener.Close()
		}
		return failed(err)
	}
	// A database DB_DSN names that does not exist is created if the user may (and a log line says so).
	if stores, err = wire.OpenLocalStores(ctx, cfg, log); err != nil {
		return abort(err)
	}
	log.Info("local: database ready", "allocator", cmp.Or(cfg.Store.Allocator, mysql.DefaultAllocator))
	client, err := wire.SQS(log)
	if err != nil {
		return abort(err)
	}
	if opt.Engine.Tasks, err = delivery.Tasks(ctx, cfg, log); err != nil { // the processor and the sweeper agent deliver tasks
		return abort(err)
	}
	if opt.Queues, err = queue.Ensure(ctx, client, wire.LocalQueue(cfg.Local.QueueName)); err != nil {
		return abort(err)
	}
	awsCfg, err := wire.AWS()
	if err != nil {
		return abort(err)
	}
	if opt.Counters, err = EnsureCounters(ctx, client, awsCfg,
		cmp.Or(getenv("AWS_ENDPOINT_URL_SNS"), getenv("AWS_ENDPOINT_URL_SQS"), getenv("AWS_ENDPOINT_URL")), log); err != nil {
		return abort(err)
	}
	sys, err := Start(ctx, stores, client, opt, log)
	if err != nil {
		return abort(err)
	}
	err = sys.Wait() // once ctx has ended, and every part has stopped
	// The database last: every part that used it has stopped. The local SQS endpoint is scripts/run.sh's
	// to stop, once this process has exited.
	stores.DB.Pool().Close()
	stores = nil
	if err != nil {
		log.Error("local: stopped with an error", "err", err)
		return err
	}
	log.Info("local: stopped")
	return nil
}

// Getenv is how the local runner reads getenv: config.LocalGetenv, as `make agent` and `make invoke`
// read it too, so that DB_NAME=newcomer names the same database for each.
func Getenv(getenv func(string) string) func(string) string { return config.LocalGetenv(getenv) }

// Database is the log attribute that says which database c names: host, port, name and user, never
// the password.
func Database(c config.DB) slog.Attr {
	host, port, name, user := c.Host, strconv.Itoa(cmp.Or(c.Port, 3306)), cmp.Or(c.Name, "events"), c.User
	if c.DSN != "" {
		cfg, err := drv.ParseDSN(c.DSN)
		if err != nil {
			return slog.String("database", "(DB_DSN does not parse)")
		}
		name, user = cfg.DBName, cfg.User
		if h, p, err := net.SplitHostPort(cfg.Addr); err == nil {
			host, port = h, p
		} else {
			host, port = cfg.Addr, "" // a unix socket
		}
	}
	return slog.Group("database", "host", host, "port", port, "name", name, "user", user)
}

// SQSEndpoint is the SQS endpoint the run uses, as the AWS configuration reads it from getenv.
func SQSEndpoint(getenv func(string) string) string {
	if e := cmp.Or(getenv("AWS_ENDPOINT_URL_SQS"), getenv("AWS_ENDPOINT_URL")); e != "" {
		return e
	}
	return "AWS (region " + cmp.Or(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), "from the AWS configuration") + ")"
}

// Listen takes the ports a run listens on: the API's (HTTPAddr, default 127.0.0.1:8080) and the
// metrics' (MetricsAddr, none when empty or off). A port that is taken is an error naming its
// variable and saying how to give this run ports of its own.
func Listen(opt Options) (api, metrics net.Listener, err error) {
	api, err = listen("HTTP_ADDR", cmp.Or(opt.HTTPAddr, "127.0.0.1:8080"))
	if err != nil {
		return nil, nil, err
	}
	if opt.MetricsAddr != "" && opt.MetricsAddr != config.MetricsOff {
		if metrics, err = listen("METRICS_ADDR", opt.MetricsAddr); err != nil {
			api.Close()
			return nil, nil, err
		}
	}
	return api, metrics, nil
}

func listen(variable, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s %s is taken, by another `make run` perhaps: stop what holds it, or give this run "+
			"ports of its own (%s): %w", variable, addr, ownPorts, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", variable, addr, err)
	}
	return ln, nil
}
