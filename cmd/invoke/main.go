// Command invoke runs one function's real bootstrap, built as it is deployed (for this machine's
// architecture), under the AWS Lambda Runtime Interface Emulator (internal/rie: the Runtime API
// that `sam local invoke` runs in its container, here without Docker), feeds it events and prints
// each response: the Docker-free counterpart of `sam local invoke`.
//
//	make invoke FN=api                                   # every events/api-*.json, in name order
//	make invoke FN=api EVENT=events/api-post-task.json
//	go run ./cmd/invoke -fn processor -event events/processor-batch.json
//
// The events go, one after another, to one execution environment (the first invocation inits it,
// the others find it warm), each with a new request id, through the emulator's invoke endpoint
// (POST /2015-03-31/functions/function/invocations on a free loopback port).
// The function gets the configuration it would get in AWS from the environment: DB_DSN (default:
// config.LocalDSN, the local MariaDB of `make db`; DB_NAME, DB_PORT, DB_USER and DB_PASSWORD pick
// another database there, as for `make run`), QUEUE_URL, AWS_ENDPOINT_URL_SQS, LOG_LEVEL, ... When no SQS
// endpoint is configured, a local goaws (bin/sqslocal) is started and a queue named "events"
// created in it, so that POST /events/async has somewhere to send. The responses go to stdout,
// the function's logs and the emulator's START, END and REPORT lines to stderr; the exit status is 1
// if the function failed or timed out on any event.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// passed are the variables handed to the function from this environment, as a function's
// configuration would set them.
var passed = []string{"DB_", "QUEUE_URL", "COUNTER_", "ALLOCATOR", "VISIBILITY_", "SWEEP_", "LOG_LEVEL", "AWS_ENDPOINT_URL",
	"WEBHOOK_", "RETRY_BASE", "RETRY_MAX",
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION"}

// functionEnv is the function's share of this environment (environ, as getenv reads it): the
// variables passed lists, with the database read as `make run` reads it (config.LocalGetenv), so
// that DB_NAME=newcomer make invoke uses the database of DB_NAME=newcomer make run, and DB_DSN
// unset with neither DB_NAME nor DB_HOST is make run's default database (config.LocalDSN).
func functionEnv(environ []string, getenv func(string) string) []string {
	local := config.LocalGetenv(getenv)
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DB_DSN" || (strings.HasPrefix(name, "DB_") && local(name) != getenv(name)) {
			continue // DB_DSN as local reads it, below; a variable folded into it
		}
		for _, p := range passed {
			if strings.HasPrefix(kv, p) {
				env = append(env, kv)
				break
			}
		}
	}
	if dsn := local("DB_DSN"); dsn != "" {
		env = append(env, "DB_DSN="+dsn)
	}
	return env
}

// webhookDefaults are the variables added to the function's environment (environ, as getenv reads
// it) as `make run` (scripts/run.sh) has them, each with a note to print: the samples' task goes to
// a receiver on loopback (cmd/receiver -addr 127.0.0.1:9000), signed with the development secret
// unless one is set. Neither belongs in a deployment. WEBHOOK_ALLOW_LOOPBACK is added only when
// unset: set to nothing, it is passed on for the function to refuse at start, as every true/false
// set to nothing is (docs/configuration.md), where it was read as unset and made true.
func webhookDefaults(environ []string, getenv func(string) string) (env, notes []string) {
	if strings.TrimSpace(getenv("WEBHOOK_SECRET")) == "" && strings.TrimSpace(getenv("WEBHOOK_SECRET_ARN")) == "" {
		env = append(env, "WEBHOOK_SECRET="+devWebhookSecret)
		notes = append(notes, "tasks are signed with the development secret WEBHOOK_SECRET="+devWebhookSecret)
	}
	if !slices.ContainsFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "WEBHOOK_ALLOW_LOOPBACK=") }) {
		env = append(env, "WEBHOOK_ALLOW_LOOPBACK=true")
		notes = append(notes, "WEBHOOK_ALLOW_LOOPBACK=true: tasks may be delivered to receivers on 127.0.0.0/8 and ::1")
	}
	return env, notes
}

// devWebhookSecret is `make run`'s development signing secret (scripts/run.sh).
const devWebhookSecret = config.LocalWebhookSecret

func main() {
	fn := flag.String("fn", "", "function: api, processor, sweeper, migrate or counter")
	eventPaths := flag.String("event", "", "the event JSON files, comma-separated (default: every events/<fn>*.json, in name order)")
	bootstrap := flag.String("bootstrap", "", "a bootstrap already built (default: build functions/<fn>)")
	timeout := flag.Duration("timeout", 30*time.Second, "the function timeout, whole seconds (each invocation's deadline)")
	flag.Parse()
	if *fn == "" {
		fmt.Fprintln(os.Stderr, "usage: invoke -fn <function> [-event events/<file>.json,...]")
		os.Exit(2)
	}
	if err := run(*fn, *eventPaths, *bootstrap, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "invoke:", err)
		os.Exit(1)
	}
}

// samples returns the function's samples: events/<fn>.json and events/<fn>-*.json, in name order.
func samples(root, fn string) ([]string, error) {
	one, err := filepath.Glob(filepath.Join(root, "events", fn+".json"))
	if err != nil {
		return nil, err
	}
	more, err := filepath.Glob(filepath.Join(root, "events", fn+"-*.json"))
	if err != nil {
		return nil, err
	}
	all := append(one, more...)
	sort.Strings(all)
	return all, nil
}

// functions are the functions make invoke can run: the directories of functions/.
func functions(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func run(fn, eventPaths, bootstrap string, timeout time.Duration) error {
	ctx := context.Background()
	fns, err := functions(repo.Root())
	if err != nil {
		return err
	}
	if !slices.Contains(fns, fn) {
		return fmt.Errorf("no function %q: FN (-fn) is one of %s, the directories of functions/", fn, strings.Join(fns, ", "))
	}
	var paths []string
	if eventPaths == "" {
		var err error
		if paths, err = samples(repo.Root(), fn); err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("no events/%s*.json sample: name one with -event", fn)
		}
	} else {
		paths = strings.Split(eventPaths, ",")
	}
	payloads := make([][]byte, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !json.Valid(b) {
			return fmt.Errorf("%s is not JSON", p)
		}
		payloads[i] = b
	}
	if bootstrap == "" {
		dir := filepath.Join(repo.Root(), "build", "lambda-host")
		start := time.Now()
		var err error
		if bootstrap, err = rie.BuildBootstrap(ctx, repo.Root(), fn, dir); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "built %s in %s\n", bootstrap, time.Since(start).Round(time.Millisecond))
	}

	env := functionEnv(os.Environ(), os.Getenv)
	added, notes := webhookDefaults(os.Environ(), os.Getenv)
	env = append(env, added...)
	for _, n := range notes {
		fmt.Fprintln(os.Stderr, n)
	}
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

	f, err := rie.Start(rie.Config{Bootstrap: bootstrap, Function: fn, Env: env, Timeout: timeout,
		Output: &prefixWriter{w: os.Stderr, prefix: fn + " | "}})
	if err != nil {
		return err
	}
	defer f.Stop()
	fmt.Fprintf(os.Stderr, "the Lambda Runtime Interface Emulator runs %s: POST %s\n", fn, f.URL)
	var failed []string
	for i, payload := range payloads {
		fmt.Fprintf(os.Stderr, "--- %s\n", paths[i])
		ictx, cancel := context.WithTimeout(ctx, f.Timeout+time.Minute)
		res, err := f.Invoke(ictx, payload, "")
		cancel()
		if err != nil {
			return err
		}
		fmt.Printf("%s (request id %s):\n", filepath.Base(paths[i]), res.RequestID)
		switch {
		case res.Error != nil:
			out, _ := json.MarshalIndent(res.Error, "", "  ")
			fmt.Println(string(out))
			failed = append(failed, fmt.Sprintf("%s: %s", filepath.Base(paths[i]), res.Error))
		default:
			var pretty bytes.Buffer
			if json.Indent(&pretty, res.Payload, "", "  ") != nil {
				pretty.Reset()
				pretty.Write(res.Payload)
			}
			fmt.Println(pretty.String())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the function failed on %d of %d events:\n  %s", len(failed), len(payloads), strings.Join(failed, "\n  "))
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
