package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	drv "github.com/go-sql-driver/mysql"
)

// TestMain runs the tests, or, when the test binary is started again by a test in a child role, a
// real process that the test can kill: a processor or an API server.
func TestMain(m *testing.M) {
	// The driver logs every connection the tests cut or kill; the tests assert on what matters.
	_ = drv.SetLogger(stdlog.New(io.Discard, "", 0))
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// Child processes are configured by the environment:
//
//	DB_DSN                 the test's database
//	AWS_ENDPOINT_URL_SQS   the SQS endpoint
//	QUEUE_URL              the queue to poll (processor) or send to (api)
//	CHILD_LINGER           api only: api.AsyncGroup.Linger, a duration; default 0
//	CHILD_HANG             processor only: "claimed" hangs inside the processing transaction, after
//	                       the claim and before the commit; "committed" hangs after the commit and
//	                       before the processor reports the settlement (so a kill leaves it
//	                       unreported); "handled" hangs after the handler has returned (committed
//	                       and reported) and before the mapping acknowledges (deletes)
//	                       The taskworker role delivers tasks (to loopback), says "delivered
//	                       <webhook-id> <status>" after each answer and hangs before settling it.
//	REPORTS                processor and taskworker (required): the file the processor reports its
//	                       settlements to (verify.FileReporter), for the test's exactly-once check.
//	                       The api role settles nothing but the events it creates settled, which
//	                       no worker reports.
//
// A child says what it does on stdout, one line per step, for the test to await.
func runChild(role string) int {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	client := localsqs.NewClient(os.Getenv("AWS_ENDPOINT_URL_SQS"))
	queueURL := os.Getenv("QUEUE_URL")
	hang := func() { time.Sleep(time.Hour) } // until the test kills this process

	switch role {
	case "processor":
		reports, err := verify.OpenFileReporter(os.Getenv("REPORTS"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "REPORTS:", err)
			return 2
		}
		mode := os.Getenv("CHILD_HANG")
		var report processing.Reporter = reports
		if mode == "committed" {
			report = hangBeforeReporting{Reporter: reports, hang: hang}
		}
		p := &processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks, Logger: log, Report: report}}
		if mode == "claimed" {
			p.Engine.Works = valueWork(func(id int64) string {
				fmt.Printf("claimed %d\n", id)
				hang()
				return ""
			})
		}
		handler := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			for _, r := range ev.Records {
				fmt.Printf("received %s\n", r.MessageId)
			}
			resp, err := p.Handle(ctx, ev)
			if mode == "handled" {
				fmt.Printf("handled failures=%d\n", len(resp.BatchItemFailures))
				hang()
			}
			return resp, err
		}
		m := mapping.New(client, handler, mapping.Config{QueueURL: queueURL, Concurrency: 1, BatchSize: 1, Logger: log})
		fmt.Println("polling")
		_ = m.Run(context.Background())
		return 0
	case "taskworker":
		// A sweeper-like worker that delivers tasks and dies between a receiver's answer and the
		// settlement: it says "delivered <webhook-id> <status>" and hangs until the test kills it.
		reports, err := verify.OpenFileReporter(os.Getenv("REPORTS"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "REPORTS:", err)
			return 2
		}
		tasks := testTasks()
		tasks.Deliverer = hangAfterDelivery{d: tasks.Deliverer, hang: hang}
		e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: log, Report: reports,
			Lease: 2 * time.Second, Tasks: tasks}
		fmt.Println("polling")
		for {
			if b, err := e.ProcessDue(context.Background(), 0, 10); err != nil || b.Claimed == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	case "api":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		linger, err := time.ParseDuration(cmp.Or(os.Getenv("CHILD_LINGER"), "0"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		srv := &api.Server{Stores: store.API(), Queue: &queue.SQSSender{Client: client, QueueURL: queueURL}, Logger: log,
			AsyncGroup: api.AsyncGroup{Linger: linger}}
		fmt.Printf("listening http://%s\n", ln.Addr())
		_ = http.Serve(ln, srv)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
	return 2
}

// hangBeforeReporting says "committed <id>" for each event a claim settled, and hangs instead of
// reporting them: the transaction has committed, the report is never written.
type hangBeforeReporting struct {
	processing.Reporter
	hang func()
}

func (h hangBeforeReporting) Settled(claimID string, ids []int64) {
	for _, id := range ids {
		fmt.Printf("committed %d\n", id)
	}
	h.hang()
}

// hangAfterDelivery delivers, says so, and hangs before the settlement can run.
type hangAfterDelivery struct {
	d    processing.Deliverer
	hang func()
}

func (h hangAfterDelivery) Deliver(ctx context.Context, r webhook.Request) webhook.Result {
	res := h.d.Deliver(ctx, r)
	fmt.Printf("delivered %s %d\n", r.ID, res.Status)
	h.hang()
	return res
}
