package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// stack is the local system (internal/local) on a scratch database and goaws.
type stack struct {
	// url is the local system's API (internal/local.Start, wired as the product is). Beside it, on
	// the same store and queue, the same API handler as two contenders: lambdaURL stores and queues
	// each request on its own, in the request's goroutine (api.AsyncGroup.Inline), as the api
	// Lambda does (it serves one request at a time and nothing may run after its answer); afterSendURL groups requests but answers each only after its group's message is sent
	// (api.AsyncGroup without Linger).
	url, lambdaURL, afterSendURL string
	db                           *sql.DB
	store                        *wire.Stores
	stop                         func()
	// goawsPID is the local SQS process, for CPU accounting.
	goawsPID int
	sys      *local.System
	// ledger hears every settlement of the local system's processor and sweeper (the exactly-once
	// check's reports); stopSystem stops the local system, so that none is between its commit and
	// its report when the check reads them. The contenders beside it settle nothing: the events
	// they create settled are born so, and those they create pending are the processor's.
	ledger     *verify.Ledger
	stopSystem func()
}

// Knobs of the local stack under load. The pool is larger than the Lambda default (4 per execution
// environment): here one process plays every environment at once. Mapping concurrency 4 with
// batches of 10 kept up with the async load here with fuller batches than 8 (each receive, delete
// and processing transaction is shared by more events) and a lower latency than 2, which let a
// backlog build (docs/performance.md).
const (
	stackPoolSize           = 32
	stackMappingConcurrency = 4
	stackMappingBatchSize   = 10
)

// startStack starts the local system with a quiet logger (warnings and errors only, to stderr).
// opts, if any, adjust the local system's options before it starts (the tasks group gives its
// workers a deliverer and lets the sweeper in).
func (r *run) startStack(ctx context.Context, label string, opts ...func(*local.Options)) (*stack, error) {
	s, err := r.newScratch(ctx, label, true)
	if err != nil {
		return nil, err
	}
	st := &stack{}

	var stops []func()
	st.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, s.drop)
	fail := func(err error) (*stack, error) {
		st.stop()
		return nil, err
	}
	if st.db, err = s.open(stackPoolSize); err != nil {
		return fail(err)
	}
	stops = append(stops, func() { st.db.Close() })
	if st.store, err = wire.StoresOn(st.db, mysql.Config{}); err != nil {
		return fail(err)
	}
	if r.cfg.SQSLocal == "" {
		return fail(errors.New("no sqslocal binary: run `make sqslocal`, or set SQSLOCAL_BIN"))
	}
	goaws, err := localsqs.Start(r.cfg.SQSLocal)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, goaws.Stop)
	st.goawsPID = goaws.Pid()
	endpoint := goaws.URL
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", "")}, queue.ClientOptions(log))
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	queues, err := queue.Ensure(qctx, client, queue.QueueSpec{Name: "bench-" + hex.EncodeToString(b), VisibilityTimeout: 30, MaxReceiveCount: 5})
	if err != nil {
		return fail(err)
	}

	sctx, cancelSys := context.WithCancel(context.WithoutCancel(ctx))
	st.ledger = verify.NewLedger()
	opt := local.Options{
		HTTPAddr: "127.0.0.1:0", Queues: queues, Engine: processing.Engine{Report: st.ledger},
		MappingConcurrency: new(stackMappingConcurrency), MappingBatchSize: stackMappingBatchSize,
		// Everything async must come through the queue: the sweeper stays out of the measurement.
		SweepInterval: time.Hour, Sweep: sweeping.Config{Grace: new(time.Hour), Logger: log},
	}
	for _, o := range opts {
		o(&opt)
	}
	sys, err := local.Start(sctx, st.store, client, opt, log)
	if err != nil {
		cancelSys()
		return fail(err)
	}
	var stopOnce sync.Once
	st.stopSystem = func() {
		stopOnce.Do(func() {
			cancelSys()
			_ = sys.Wait()
		})
	}
	stops = append(stops, st.stopSystem)
	st.url = sys.URL
	st.sys = sys

	// Contenders beside the product's wiring, on the same store and queue.
	serve := func(g api.AsyncGroup) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		srv := httpserver.New(&api.Server{Stores: st.store.API(), Queue: &queue.SQSSender{Client: client, QueueURL: queues.URL}, Logger: log,
			AsyncGroup: g})
		go func() { _ = srv.Serve(ln) }()
		stops = append(stops, func() { _ = srv.Close() })
		return "http://" + ln.Addr().String(), nil
	}
	if st.lambdaURL, err = serve(api.AsyncGroup{Inline: true}); err != nil {
		return fail(err)
	}
	if st.afterSendURL, err = serve(api.AsyncGroup{}); err != nil {
		return fail(err)
	}
	return st, nil
}

// awaitProcessed waits until no event is pending, polling, with progress; bounded by timeout.
func (r *run) awaitProcessed(ctx context.Context, group string, db *sql.DB, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := time.Now()
	for {
		pending, err := mysqltest.CountOpen(ctx, db)
		if err != nil {
			return err
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d events still pending after %s: %w", pending, timeout, errTimeout)
		}
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			r.progress(group, "  waiting for the queue path: %d pending", pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// verifySettled stops the local system and checks that every event is settled exactly once, by the
// reports of the processor and the sweeper (or born settled by the API and reported by none), and
// that ids are unique and came from the counter. seeded are rows the bench loaded settled.
func (r *run) verifySettled(ctx context.Context, group string, st *stack, seeded ...idRange) error {
	st.stopSystem()
	chk, err := audit(ctx, st.db, st.ledger, seeded...)
	if err != nil {
		return err
	}
	r.check(group, "every event settled exactly once, by the workers' reports", settledOnce(chk), describe(chk))
	c, err := mysqltest.CountEvents(ctx, st.db)
	if err != nil {
		return err
	}
	r.check(group, "ids unique and from the status row", c.IDsOK(), c.String())
	return nil
}

// dbClockOffset estimates how far the database's NOW(6) is ahead of this process's clock, so that
// timestamps the database wrote can be compared with times taken here.
func dbClockOffset(ctx context.Context, db *sql.DB) (time.Duration, error) {
	best := time.Duration(1 << 62)
	var offset time.Duration
	for range 5 {
		before := time.Now()
		var now time.Time
		if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now); err != nil {
			return 0, err
		}
		after := time.Now()
		if rtt := after.Sub(before); rtt < best {
			best = rtt
			offset = now.Sub(before.Add(rtt / 2))
		}
	}
	return offset, nil
}
