// Package browser_test drives the operators' console in a real browser: Debian's Chromium, headless,
// through the DevTools protocol (chromedp), against a whole local system (the API with the console
// mounted at /ui/, processors behind the local SQS endpoint, the sweeper's agent, the counter
// service) on a scratch database. It writes a screenshot of each page to build/ui/ and runs axe-core
// (WCAG 2 A and AA rules) on each.
package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
)

// TestMain runs the test binary as a standalone agent when started in the "agent" role: the agent
// the test kills with SIGKILL to watch its range move on the console's ring.
func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runAgent(role))
	}
	os.Exit(m.Run())
}

func runAgent(role string) int {
	if role != "agent" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	as, err := delivery.StandaloneAgents(context.Background(), cfg, store, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	a := as[0]
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("started")
	_ = a.Run(context.Background()) // until killed
	return 0
}

// repoRoot is the module's root, where build/ and node_modules/ are.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// browser starts a headless Chromium that may reach nothing but loopback: its host resolver maps
// every name to nothing except 127.0.0.1, and its background services (updates, sync, safe
// browsing, metrics) are off.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv("CHROMIUM_BIN")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no Chromium at %s (%v): `make test` installs Debian's with scripts/chromium.sh ensure; CHROMIUM_BIN names another", bin, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("dns-prefetch-disable", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return bctx
}

// run runs steps in the browser with a deadline, failing the test with what it was doing and the
// page's text.
func run(t *testing.T, bctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	value(t, bctx, what, chromedp.Steps(steps...))
}

// value runs one action that gives a value, as run does.
func value[T any](t *testing.T, bctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 45*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
	}
	return v
}

// until waits for a JavaScript condition on the page to hold.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(40*time.Second))
}

// shot writes a screenshot of the whole page to build/ui/name.png.
func shot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	png := value(t, bctx, "screenshot "+name, chromedp.FullScreenshot(100))
	dir := filepath.Join(repoRoot(t), "build", "ui")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// violation is one axe-core rule broken on a page.
type violation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// accessible runs axe-core's WCAG 2 A and AA rules on the page as it is, and fails the test on
// any violation.
func accessible(t *testing.T, bctx context.Context, page string) {
	t.Helper()
	path := filepath.Join(repoRoot(t), "node_modules", "axe-core", "axe.min.js")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("axe-core (%v): `make test` installs it with npm ci (package.json pins it)", err)
	}
	run(t, bctx, "load axe-core on "+page, chromedp.Evaluate[chromedp.Void](string(src)))
	out := value(t, bctx, "axe on "+page, chromedp.Evaluate[string](`axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
			.then(r => JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
				nodes: v.nodes.map(n => n.target.join(' '))}))))`, chromedp.EvalAwaitPromise))
	var vs []violation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("axe's answer on %s: %v: %s", page, err, out)
	}
	for _, v := range vs {
		t.Errorf("accessibility, %s: %s (%s, %s) at %s", page, v.ID, v.Help, v.Impact, strings.Join(v.Nodes, "; "))
	}
}
