// Command ui serves the operators' console (internal/console) on this machine, against a deployed
// stack's API: it signs every call to the API with the operator's AWS credentials (SigV4, service
// execute-api), and reads and redrives the stack's queues with them.
//
//	make ui API_URL=https://<id>.execute-api.<region>.amazonaws.com/v1/
//
// API_URL (required) is the stack's ApiUrl output. UI_ADDR is where the console listens (default
// 127.0.0.1:8081); an address that is not loopback is refused unless UI_ALLOW_REMOTE=true, since
// whoever reaches the console acts with the operator's credentials. UI_HOSTS adds Host names the
// console answers to (comma-separated host:port). QUEUES lists the source queues shown with their
// DLQs (names or URLs, comma-separated; set and empty: none); default the stack's,
// <CDK_STACK>-events and <CDK_STACK>-counters, CDK_STACK defaulting to ExactlyOnce as in infra/.
// FUNCTIONS names the stack's Lambda functions whose CloudWatch metrics give the overview's rates
// of processing by path (console.CloudWatchRates), as api=<name>,processor=<name>,sweeper=<name>
// (any of them; unset: the rates say they are not configured): CloudFormation generates the names,
// so there is no default; the stack's resources list them. Reading them takes the IAM action
// cloudwatch:GetMetricData. The AWS configuration (profile, region, credentials) is the SDK's
// standard one.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/exactlyonce/exactlyonce/internal/console"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// DefaultAddr is where the console listens when UI_ADDR is unset: beside `make run`'s 8080.
const DefaultAddr = "127.0.0.1:8081"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.LookupEnv, os.Environ(), log); err != nil {
		fmt.Fprintln(os.Stderr, "ui:", err)
		os.Exit(1)
	}
}

// uiVariables are the console's own settings (docs/console.md): any other UI_ variable in its
// environment is a typo, refused at start naming them (UI_ALLOW_REMOT=true was ignored, and the
// console listened on loopback only without a word).
var uiVariables = []string{"UI_ADDR", "UI_ALLOW_REMOTE", "UI_HOSTS"}

// run starts the console from the environment lookup reads; environ (os.Environ's form, nil: not
// checked) is searched for UI_ variables it does not read.
func run(ctx context.Context, lookup func(string) (string, bool), environ []string, log *slog.Logger) error {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "UI_") && !slices.Contains(uiVariables, name) {
			return fmt.Errorf("%s is not a setting of the console: its settings are %s", name, strings.Join(uiVariables, ", "))
		}
	}
	apiURL := getenv("API_URL")
	if apiURL == "" {
		return errors.New("API_URL is required: the stack's ApiUrl output, such as make ui API_URL=https://<id>.execute-api.<region>.amazonaws.com/v1/")
	}
	if _, err := console.CheckAPIURL(apiURL); err != nil {
		return err
	}
	addr := cmp.Or(getenv("UI_ADDR"), DefaultAddr)
	if err := checkAddr(addr, getenv("UI_ALLOW_REMOTE")); err != nil {
		return err
	}
	queues := defaultQueues(cmp.Or(getenv("CDK_STACK"), "ExactlyOnce"))
	if v, ok := lookup("QUEUES"); ok {
		queues = split(v)
	}
	functions, err := parseFunctions(getenv("FUNCTIONS"))
	if err != nil {
		return err
	}

	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("AWS configuration: %w", err)
	}
	// Fail now, not at the first page, when there are no credentials to sign with.
	if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("AWS credentials (the console signs its calls with them): %w", err)
	}
	region := console.RegionOf(hostOf(apiURL))
	region = cmp.Or(region, awsCfg.Region)
	// The queues are the stack's too: without a region of the SDK's own (no AWS_REGION, no
	// profile region), the one API_URL names is theirs.
	awsCfg.Region = cmp.Or(awsCfg.Region, region)
	// The functions are in the API's region, the stack's.
	rates, err := console.NewCloudWatchRates(cloudwatch.NewFromConfig(awsCfg, func(o *cloudwatch.Options) { o.Region = region }), functions)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s (UI_ADDR): %w", addr, err)
	}
	opt := console.Options{APIURL: apiURL, Credentials: awsCfg.Credentials, Region: region,
		Addr: ln.Addr().String(), SQS: queue.NewClient(awsCfg, log), Queues: queues, Rates: rates, Logger: log}
	if hosts := split(getenv("UI_HOSTS")); len(hosts) > 0 {
		_, port, _ := net.SplitHostPort(opt.Addr)
		opt.Hosts = append([]string{opt.Addr, "localhost:" + port, "127.0.0.1:" + port}, hosts...)
	}
	h, err := console.New(opt)
	if err != nil {
		ln.Close()
		return err
	}
	srv := httpserver.New(h)
	fmt.Printf("console: http://%s/ui/\n  API:    %s (signed with your AWS credentials, region %s)\n  queues: %s\n  rates:  %s\n",
		ln.Addr(), apiURL, region, cmp.Or(strings.Join(queues, ", "), "none"), describeFunctions(functions))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// checkAddr refuses a listen address that is not loopback, unless allowRemote is true: whoever
// reaches the console acts with the operator's AWS credentials. allowRemote is UI_ALLOW_REMOTE,
// read as every true/false is (strconv.ParseBool, spaces around it aside); empty is unset, false;
// anything else (yes, on) is refused naming it, where it was read as false without a word.
func checkAddr(addr, allowRemote string) error {
	remote := false
	if v := strings.TrimSpace(allowRemote); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("UI_ALLOW_REMOTE must be true or false, got %q", allowRemote)
		}
		remote = b
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("UI_ADDR %q: want host:port, such as %s", addr, DefaultAddr)
	}
	ip := net.ParseIP(host)
	if strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback() {
		return nil
	}
	if remote {
		return nil
	}
	return fmt.Errorf("UI_ADDR %s is not a loopback address: the console calls the API and redrives queues with your AWS "+
		"credentials, so anyone who reaches it could too. Serve it on 127.0.0.1 (the default) and reach it through an SSH "+
		"tunnel, or set UI_ALLOW_REMOTE=true if the network it listens on is yours alone", addr)
}

// defaultQueues are the stack's source queues as infra/ names them: <stack>-events and
// <stack>-counters (NewQueues, NewCounterService), each with its -dlq.
func defaultQueues(stack string) []string {
	return []string{stack + "-events", stack + "-counters"}
}

// parseFunctions reads FUNCTIONS: path=name pairs, comma-separated, each path (api, processor,
// sweeper) at most once. Empty: none.
func parseFunctions(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range split(s) {
		path, name, ok := strings.Cut(pair, "=")
		path, name = strings.TrimSpace(path), strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("FUNCTIONS: %q: want api=<name>,processor=<name>,sweeper=<name> (the stack's Lambda functions)", pair)
		}
		switch path {
		case console.PathAPI, console.PathProcessor, console.PathSweeper:
		default:
			return nil, fmt.Errorf("FUNCTIONS: unknown path %q: the functions publishing to CloudWatch are api, processor and sweeper", path)
		}
		if !functionName(name) {
			return nil, fmt.Errorf("FUNCTIONS: %s=%q is not a Lambda function's name (letters, digits, - and _, at most 64)", path, name)
		}
		if _, dup := out[path]; dup {
			return nil, fmt.Errorf("FUNCTIONS: %s is named twice", path)
		}
		out[path] = name
	}
	return out, nil
}

// functionName says whether s is a Lambda function's name, which is the FunctionName dimension's
// value (not its ARN).
func functionName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	})
}

// describeFunctions says where the rates come from, for the start-up lines.
func describeFunctions(functions map[string]string) string {
	if len(functions) == 0 {
		return "none (set FUNCTIONS=api=<name>,processor=<name>,sweeper=<name> for CloudWatch's)"
	}
	var parts []string
	for _, p := range []string{console.PathAPI, console.PathProcessor, console.PathSweeper} {
		if n := functions[p]; n != "" {
			parts = append(parts, p+"="+n)
		}
	}
	return "CloudWatch, " + strings.Join(parts, ", ")
}

func split(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// hostOf returns the host of the URL u ("" if it is not one; console.New then says what is wrong).
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Hostname()
}
