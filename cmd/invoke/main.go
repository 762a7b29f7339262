// Command invoke runs one function's real bootstrap, built as it is deployed (for this machine's
// architecture), against a local implementation of the Lambda Runtime API, feeds it an event and
// prints the response: the Docker-free counterpart of `sam local invoke`.
//
//	make invoke FN=api EVENT=events/api-post-events.json
//	go run ./cmd/invoke -fn processor -event events/sqs-batch.json
//
// The function gets the configuration it would get in AWS from the environment: DB_DSN (default:
// config.LocalDSN, the local MariaDB of `make db`), QUEUE_URL, AWS_ENDPOINT_URL_SQS, LOG_LEVEL, ... When no SQS
// endpoint is configured, a local goaws (bin/sqslocal) is started and a queue named "events"
// created in it, so that POST /events/async has somewhere to send. The response goes to stdout,
// the function's logs and a REPORT line to stderr; the exit status is 1 if the function failed.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/runtimeapi"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// passed are the variables handed to the function from this environment, as a function's
// configuration would set them.
var passed = []string{"DB_", "QUEUE_URL", "COUNTER_", "ALLOCATOR", "VISIBILITY_", "SWEEP_", "LOG_LEVEL", "AWS_ENDPOINT_URL",
	"WEBHOOK_", "RETRY_BASE", "RETRY_MAX",
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION"}

func main() {
	fn := flag.String("fn", "", "function: api, processor, sweeper, migrate or counter")
	eventPath := flag.String("event", "", "the event JSON file (events/*.json)")
	bootstrap := flag.String("bootstrap", "", "a bootstrap already built (default: build functions/<fn>)")
	timeout := flag.Duration("timeout", 30*time.Second, "the function timeout (the invocation's deadline)")
	flag.Parse()
	if *fn == "" || *eventPath == "" {
		fmt.Fprintln(os.Stderr, "usage: invoke -fn <function> -event events/<file>.json")
		os.Exit(2)
	}
	if err := run(*fn, *eventPath, *bootstrap, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "invoke:", err)
		os.Exit(1)
	}
}

func run(fn, eventPath, bootstrap string, timeout time.Duration) error {
	ctx := context.Background()
	payload, err := os.ReadFile(eventPath)
	if err != nil {
		return err
	}
	if !json.Valid(payload) {
		return fmt.Errorf("%s is not JSON", eventPath)
	}
	if bootstrap == "" {
		dir := filepath.Join(repo.Root(), "build", "lambda-host")
		start := time.Now()
		if bootstrap, err = runtimeapi.BuildBootstrap(ctx, repo.Root(), fn, dir); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "built %s in %s\n", bootstrap, time.Since(start).Round(time.Millisecond))
	}

	var env []string
	for _, kv := range os.Environ() {
		for _, p := range passed {
			if strings.HasPrefix(kv, p) {
				env = append(env, kv)
				break
			}
		}
	}
	env = append(env, "DB_DSN="+cmp.Or(os.Getenv("DB_DSN"), config.LocalDSN))
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		goaws, err := localsqs.Start("") // dies with this process
		if err != nil {
			return fmt.Errorf("local SQS: %w", err)
		}
		url := goaws.URL
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		q, err := queue.Ensure(qctx, localsqs.NewClient(url), wire.LocalQueue(""))
		cancel()
		if err != nil {
			return err
		}
		env = append(env, "AWS_ENDPOINT_URL_SQS="+url, "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local")
		if os.Getenv("QUEUE_URL") == "" {
			env = append(env, "QUEUE_URL="+q.URL)
		}
		fmt.Fprintf(os.Stderr, "local SQS on %s, queue %s\n", url, q.URL)
	}

	logs := &prefixWriter{w: os.Stderr, prefix: fn + " | "}
	p, err := runtimeapi.StartProcess(runtimeapi.ProcessConfig{Bootstrap: bootstrap, Function: fn, Env: env,
		Timeout: timeout, Output: logs})
	if err != nil {
		return err
	}
	defer p.Stop()
	ictx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	res, err := p.Invoke(ictx, payload)
	if err != nil {
		return err
	}
	if res.Error != nil {
		out, _ := json.MarshalIndent(res.Error, "", "  ")
		fmt.Println(string(out))
	} else {
		var pretty bytes.Buffer
		if json.Indent(&pretty, res.Payload, "", "  ") != nil {
			pretty.Reset()
			pretty.Write(res.Payload)
		}
		fmt.Println(pretty.String())
	}
	fmt.Fprintf(os.Stderr, "REPORT RequestId: %s Duration: %.2f ms Init Duration: %.2f ms Status: %s\n",
		res.RequestID, float64(res.Duration.Microseconds())/1000, float64(p.InitDuration().Microseconds())/1000,
		map[bool]string{true: "error", false: "success"}[res.Error != nil])
	if res.Error != nil {
		return fmt.Errorf("the function failed: %s", res.Error)
	}
	return nil
}

// prefixWriter prefixes each line of the function's output.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
}
