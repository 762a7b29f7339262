// Command bench measures the hot paths side by side against the real database and goaws, prints a
// table and writes the same figures as JSON. `make bench` runs it; see docs/performance.md.
//
//	BENCH=full|smoke     how long (default full; smoke takes seconds and judges no targets)
//	BENCH_OUT=file.json  where the JSON goes (default bench-results.json)
//	BENCH_GROUPS=a,b     run only these groups (alloc, claim, count, drain, agents, async, idem, api, lambda, counters, tasks, reads, archive, console)
//	BENCH_ARCHIVED=n     the archive group's archived events behind its window (default 20000000;
//	                     about 60 bytes of disk each under TMPDIR, checked before it starts)
//	BENCH_DB_DSN=dsn     the server to create scratch databases on (default: the `make db` server)
//	SQSLOCAL_BIN=path    the goaws binary (default bin/sqslocal)
//	BENCH_CPUPROFILE=f   write this process's CPU profile (the API, processor and load generator) to f
//	BENCH_MARKDOWN=f     also write the table as Markdown to f (for docs/performance.md)
//
// It exits 1 if a group failed or a correctness check failed; missed targets are reported, not fatal.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/exactlyonce/exactlyonce/internal/bench"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/repo"
)

func main() {
	// The agents group starts this binary again as standalone agents.
	if os.Getenv(child.RoleEnv) == bench.AgentRole {
		os.Exit(bench.RunAgent())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cfg := bench.Config{
		Mode:      bench.Mode(cmp.Or(os.Getenv("BENCH"), string(bench.Full))),
		ServerDSN: cmp.Or(os.Getenv("BENCH_DB_DSN"), config.LocalServerDSN), // its scratch databases are made and dropped there
		SQSLocal:  cmp.Or(os.Getenv("SQSLOCAL_BIN"), filepath.Join(root, "bin", "sqslocal")),
		RepoRoot:  root,
	}
	if a := os.Getenv("BENCH_ARCHIVED"); a != "" {
		n, err := strconv.ParseInt(strings.ReplaceAll(a, "_", ""), 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("BENCH_ARCHIVED=%q: want a positive number of events", a)
		}
		cfg.Archived = n
	}
	if g := os.Getenv("BENCH_GROUPS"); g != "" {
		cfg.Groups = strings.Split(g, ",")
	}
	out := cmp.Or(os.Getenv("BENCH_OUT"), "bench-results.json")
	if p := os.Getenv("BENCH_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	if err := report.WriteTable(os.Stdout); err != nil {
		return err
	}
	// The figures are the point of a run that may have taken minutes: create the directory they go
	// to rather than fail at the end.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := writeFile(out, report.WriteJSON); err != nil {
		return err
	}
	if md := os.Getenv("BENCH_MARKDOWN"); md != "" {
		if err := writeFile(md, report.WriteMarkdown); err != nil {
			return err
		}
	}
	if report.Failed() {
		return fmt.Errorf("%d errors or failed checks (see above)", len(report.Errors)+report.FailedChecks())
	}
	return nil
}

// repoRoot finds the module's root from the working directory upwards (go.mod with this module),
// or else is the source tree this binary was built from.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/exactlyonce/exactlyonce\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return repo.Root(), nil // the source tree this binary was built from
}

// writeFile creates path, writes it with write and says so.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", path)
	return nil
}
