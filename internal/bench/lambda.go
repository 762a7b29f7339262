package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/rie"
)

// helloMain is the hello-world bootstrap the functions' start-up is compared with: aws-lambda-go's
// lambda.Start and a handler that does nothing, built the same way.
const helloMain = `package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context) (string, error) { return "hello", nil })
}
`

// runtimeNext is the request a bootstrap makes when it is ready for its first event.
const runtimeNext = "/2018-06-01/runtime/invocation/next"

// runLambda builds each function's bootstrap as the deployment does (linux/arm64, static, stripped)
// and reports its size; builds them again for this machine and measures start-up: from process
// start to its first GET of the next invocation from the Lambda Runtime API, served here by a
// small HTTP server. Start-ups alternate between the functions and a hello-world bootstrap built in
// the same run, and the medians are compared. The functions run their real init against a migrated
// scratch database. The judged rows are the api, processor and sweeper as the stack deploys them,
// DB_MIGRATE=false (infra/functions.go; docs/deploy.md, "Functions": the migrate trigger has applied
// the schema before they can run), whose init makes no database round trip; each is also measured
// with DB_MIGRATE=true, the default outside the stack, which connects and checks the schema version
// at init, and reported beside, not judged. The migrate function is judged as deployed (its handler
// migrates; its init does not touch the database).
func runLambda(ctx context.Context, r *run) error {
	const group = "lambda"
	fns := pick(r, []string{"api", "processor", "sweeper", "migrate"}, []string{"api"})
	samples := pick(r, 21, 2)
	tmp, err := os.MkdirTemp("", "bench-lambda-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// The hello world, in its own module, resolving aws-lambda-go to the version the repo uses.
	helloDir := filepath.Join(tmp, "hello")
	if err := writeHello(r.cfg.RepoRoot, helloDir); err != nil {
		return err
	}
	sources := map[string]string{"hello": helloDir}
	for _, fn := range fns {
		sources[fn] = filepath.Join(r.cfg.RepoRoot, "functions", fn)
	}
	all := append([]string{"hello"}, fns...)

	archs := []string{runtime.GOARCH}
	if !r.smoke() && runtime.GOARCH != "arm64" {
		archs = append([]string{"arm64"}, archs...)
	}
	bins := map[string]string{} // host binaries, for start-up
	sizes := map[string]Row{}
	for _, arch := range archs {
		for _, name := range all {
			out := filepath.Join(tmp, arch, name, "bootstrap")
			t0 := time.Now()
			// As the deployment builds a bootstrap. -mod=mod: the hello world is its own module, resolved
			// when built.
			if err := rie.Build(ctx, sources[name], ".", out, arch, "GOFLAGS=-mod=mod"); err != nil {
				return fmt.Errorf("build %s for %s: %w", name, arch, err)
			}
			fi, err := os.Stat(out)
			if err != nil {
				return err
			}
			r.progress(group, "built %-9s linux/%-5s %5.1f MB in %.1f s", name, arch, float64(fi.Size())/1e6, time.Since(t0).Seconds())
			if arch == runtime.GOARCH {
				bins[name] = out
			}
			if arch == archs[0] {
				row := Row{Group: group, Name: fmt.Sprintf("lambda_%s_%s_mb", name, arch), Value: float64(fi.Size()) / 1e6, Unit: "MB"}
				if name != "hello" {
					row.goal = atMost(15)
				}
				sizes[name] = row
			}
		}
	}
	for _, name := range all {
		r.add(sizes[name])
	}

	// The database the functions initialise against.
	s, err := r.newScratch(ctx, "lambda", true)
	if err != nil {
		return err
	}
	defer s.drop()
	rt, err := newRuntimeAPI()
	if err != nil {
		return err
	}
	defer rt.close()
	// The environment Lambda gives a provided.al2023 function, not this process's: variables such as
	// AWS_CA_BUNDLE (set on some machines) would make the SDK parse a CA bundle at init, which
	// Lambda does not.
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=en_US.UTF-8", "TZ=:UTC",
		"AWS_LAMBDA_RUNTIME_API=" + rt.addr,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1024", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/bench", "AWS_LAMBDA_LOG_STREAM_NAME=bench", "_HANDLER=bootstrap",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench", "AWS_SESSION_TOKEN=bench",
		// The API sends to a queue: its init builds the SQS client. Nothing is sent at init.
		"QUEUE_URL=http://127.0.0.1:9/000000000000/bench", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:9",
		"DB_DSN=" + s.dsn, "LOG_LEVEL=error",
	}
	// Each function but migrate also without the schema check at init (DB_MIGRATE=false, as the stack
	// deploys them): its pool then connects on first use.
	runs := slices.Clone(all)
	for _, fn := range fns {
		if fn != "migrate" {
			runs = append(runs, fn+noMigrate)
		}
	}
	startups := map[string][]time.Duration{}
	for i := range samples + 1 {
		for _, name := range runs {
			fn, deployed := strings.CutSuffix(name, noMigrate)
			bin, fenv := bins[fn], append(slices.Clone(env), "AWS_LAMBDA_FUNCTION_NAME="+fn)
			if deployed {
				fenv = append(fenv, "DB_MIGRATE=false")
			}
			d, err := rt.measure(ctx, bin, fenv)
			if err != nil {
				return fmt.Errorf("start %s: %w", name, err)
			}
			if i > 0 { // the first start of each is a warm-up (page cache)
				startups[name] = append(startups[name], d)
			}
		}
		if i > 0 && (i%5 == 0 || i == samples) {
			r.progress(group, "start-up sample %d/%d", i, samples)
		}
	}
	median := func(name string) Row {
		ds := slices.Clone(startups[name])
		slices.Sort(ds)
		return Row{Group: group, Name: fmt.Sprintf("lambda_%s_startup_ms", name), Value: ms(ds[len(ds)/2]), Unit: "ms",
			Note: fmt.Sprintf("median of %d, linux/%s; min %.2f, max %.2f", len(ds), runtime.GOARCH, ms(ds[0]), ms(ds[len(ds)-1]))}
	}
	hello := median("hello")
	r.add(hello)
	for _, fn := range fns {
		row := median(fn)
		if fn == "migrate" {
			row.Note += "; migrates in its handler, so its init does not touch the database"
			r.add(row, ratio(group, "lambda_migrate_startup_ratio", row, hello, atMost(1.5), ""))
			continue
		}
		// DB_MIGRATE=true: reported, not judged (the stack does not run them so).
		row.Note += "; init connects and checks the schema version (DB_MIGRATE=true, the default outside the stack; not judged)"
		r.add(row, ratio(group, fmt.Sprintf("lambda_%s_startup_ratio", fn), row, hello, nil, ""))
		nm := median(fn + noMigrate)
		nm.Name = fmt.Sprintf("lambda_%s_nomigrate_startup_ms", fn)
		nm.Note += "; DB_MIGRATE=false, as the stack deploys it: no database round trip at init (judged)"
		r.add(nm, ratio(group, fmt.Sprintf("lambda_%s_nomigrate_startup_ratio", fn), nm, hello, atMost(1.5), ""))
	}
	return nil
}

// noMigrate names a function's start-ups with DB_MIGRATE=false.
const noMigrate = "-nomigrate"

// writeHello writes the hello-world module into dir, with the repo's go.sum so that aws-lambda-go
// resolves to the version the functions use, from the module cache.
func writeHello(repo, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	version := ""
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/aws/aws-lambda-go" {
			version = f[1]
		}
	}
	if version == "" {
		return errors.New("go.mod does not require github.com/aws/aws-lambda-go")
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		return err
	}
	files := map[string]string{
		"go.mod":  fmt.Sprintf("module benchhello\n\ngo 1.26\n\nrequire github.com/aws/aws-lambda-go %s\n", version),
		"go.sum":  string(sum),
		"main.go": helloMain,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runtimeAPI is the part of the Lambda Runtime API a bootstrap calls first. It records when the
// next-invocation request arrives and never answers it: the process is killed then.
type runtimeAPI struct {
	addr   string
	srv    *http.Server
	nextAt chan time.Time
}

func newRuntimeAPI() (*runtimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rt := &runtimeAPI{addr: ln.Addr().String(), nextAt: make(chan time.Time, 16)}
	rt.srv = httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet || req.URL.Path != runtimeNext {
			http.NotFound(w, req)
			return
		}
		select {
		case rt.nextAt <- time.Now():
		default:
		}
		<-req.Context().Done() // held until the bootstrap is killed
	}))
	go func() { _ = rt.srv.Serve(ln) }()
	return rt, nil
}

func (rt *runtimeAPI) close() { _ = rt.srv.Close() }

// measure starts bin and returns the time until its first next-invocation request, then kills it.
func (rt *runtimeAPI) measure(ctx context.Context, bin string, env []string) (time.Duration, error) {
	for len(rt.nextAt) > 0 { // a late request of an earlier process
		<-rt.nextAt
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	exited := make(chan error, 1)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	select {
	case at := <-rt.nextAt:
		return at.Sub(start), nil
	case err := <-exited:
		exited <- err // for the deferred wait
		return 0, fmt.Errorf("exited before asking for work (%v): %.500s", err, stderr.String())
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("no request for work within 30 s: %.500s", stderr.String())
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
