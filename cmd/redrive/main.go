// Command redrive moves the messages of a dead-letter queue back to its source queue, once the cause
// that put them there is fixed (docs/runbook.md, "The DLQ has messages").
//
//	make redrive QUEUE=events DRY_RUN=1   # list what would move; moves and deletes nothing
//	make redrive QUEUE=events             # move them
//	make redrive QUEUE=events LOCAL=1     # against the local SQS endpoint of `make run`
//
// QUEUE names the source queue (a name, or a URL); its DLQ is the one the source queue's
// RedrivePolicy names (deadLetterTargetArn), as on AWS and locally (queue.Ensure sets the same
// policy). DLQ=<name or URL> may name it too, as a check: another queue (another queue's DLQ) is
// refused before anything moves, and so is a DLQ that other queues name as theirs too (its
// messages are not all the source queue's). -every is how often a move task's progress is
// printed, at least 1s. The SQS client is configured the standard way (region,
// credentials, AWS_ENDPOINT_URL_SQS / AWS_ENDPOINT_URL); LOCAL=1 instead points it at
// http://127.0.0.1:$SQSLOCAL_PORT (default 4100) with dummy credentials, as `make run` does.
//
// The work is internal/redrive's (shared with the operators' console): a message move task on AWS,
// one by one where the endpoint lacks them (the local goaws); at least once either way.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/redrive"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	if err := setButEmpty(os.LookupEnv); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(2)
	}
	queueName := flag.String("queue", os.Getenv("QUEUE"), "the source queue, a name or URL (default $QUEUE)")
	dlqName := flag.String("dlq", os.Getenv("DLQ"), "its dead-letter queue, a name or URL, checked: it must be the one the source queue's RedrivePolicy names (default $DLQ; empty: that one)")
	dryRun := flag.Bool("dry-run", envBool("DRY_RUN"), "list the messages that would move; move and delete nothing (default $DRY_RUN)")
	local := flag.Bool("local", envBool("LOCAL"), "use the local SQS endpoint of `make run`, http://127.0.0.1:$SQSLOCAL_PORT (default $LOCAL)")
	every := flag.Duration("every", 5*time.Second, "how often to report a move task's progress, at least 1s (each report is a ListMessageMoveTasks call)")
	flag.Parse()
	if *queueName == "" {
		fmt.Fprintln(os.Stderr, "usage: make redrive QUEUE=<source queue> [DLQ=<name>] [DRY_RUN=1] [LOCAL=1]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *queueName, *dlqName, *dryRun, *local, *every, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", err)
		os.Exit(1)
	}
}

// minEvery is the shortest -every: each report is a ListMessageMoveTasks call, made for a person to
// read; 0 would make them without pause until the task ends, and more than one a second only spends
// API calls.
const minEvery = time.Second

func run(ctx context.Context, queueName, dlqName string, dryRun, local bool, every time.Duration, out io.Writer) error {
	if every < minEvery {
		return fmt.Errorf("-every %v: the interval between two reports of a move task's progress must be at least %v", every, minEvery)
	}
	var client *sqs.Client
	if local {
		endpoint := "http://127.0.0.1:" + cmp.Or(os.Getenv("SQSLOCAL_PORT"), "4100")
		client = localsqs.NewClient(endpoint)
		fmt.Fprintf(out, "endpoint: %s (LOCAL)\n", endpoint)
	} else {
		var err error
		if client, err = wire.SQS(slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
			return fmt.Errorf("AWS configuration: %w", err)
		}
		endpoint := cmp.Or(os.Getenv("AWS_ENDPOINT_URL_SQS"), os.Getenv("AWS_ENDPOINT_URL"), "AWS, region "+client.Options().Region)
		fmt.Fprintf(out, "endpoint: %s\n", endpoint)
	}
	q, err := redrive.Resolve(ctx, client, queueName, dlqName)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "source queue: %s\nDLQ:          %s\n", q.SourceURL, q.DLQURL)
	if dryRun {
		_, _, err := redrive.Peek(ctx, client, q, 0, out)
		return err
	}
	_, err = redrive.Redrive(ctx, client, q, every, out)
	return err
}

// envBool reads a yes/no variable: unset, empty, 0 and false are no.
func envBool(name string) bool {
	v := os.Getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b // anything else that is set (DRY_RUN=yes) means yes: the careful reading
}

// setButEmpty refuses DRY_RUN or LOCAL set to nothing (only spaces included), as the system's
// configuration refuses every true/false set to nothing: read as no, `DRY_RUN=` (a dry run meant,
// its value left out) moved every message of the DLQ.
func setButEmpty(lookup func(string) (string, bool)) error {
	var errs []error
	for _, k := range []string{"DRY_RUN", "LOCAL"} {
		if v, ok := lookup(k); ok && strings.TrimSpace(v) == "" {
			errs = append(errs, fmt.Errorf("%s is set but empty: set it to 1 (or true), or unset it", k))
		}
	}
	return errors.Join(errs...)
}
