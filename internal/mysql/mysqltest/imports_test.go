package mysqltest_test

import (
	"os/exec"
	"strings"
	"testing"
)

const (
	module = "github.com/exactlyonce/exactlyonce/"
	self   = module + "internal/mysql/mysqltest"
)

// importers are the packages whose non-test files may import mysqltest: the benchmark's and the
// chaos run's harnesses, and their commands.
var importers = map[string]bool{
	"internal/bench": true, "internal/chaos": true, "cmd/bench": true, "cmd/chaos": true,
}

// The package is for tests, `make bench` and `make chaos` only. No other package's non-test files
// import it, and no command or function but cmd/bench and cmd/chaos carries it, through any path:
// `go list -deps` lists every package a binary is built from.
func TestNoProductImportsMysqltest(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if imp == self && !importers[strings.TrimPrefix(pkg, module)] {
				t.Errorf("%s imports %s outside its tests", pkg, self)
			}
		}
	}

	out, err = exec.Command("go", "list", "-f", `{{.ImportPath}}`, module+"cmd/...", module+"functions/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	binaries := 0
	for _, bin := range strings.Fields(string(out)) {
		if importers[strings.TrimPrefix(bin, module)] {
			continue
		}
		binaries++
		deps, err := exec.Command("go", "list", "-deps", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", bin, err, deps)
		}
		for _, dep := range strings.Fields(string(deps)) {
			if dep == self {
				t.Errorf("%s is built with %s", bin, self)
			}
		}
	}
	if binaries < 8 {
		t.Fatalf("checked %d commands and functions: the listing is broken", binaries)
	}
}
