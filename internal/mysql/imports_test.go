package mysql_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/exactlyonce/exactlyonce/"

// mayImportStores are the packages whose non-test files may import the core or a store: those
// that assemble processes (wire, local, and the commands and functions), the migration, and the
// benchmark's and the chaos run's harnesses, besides the stores themselves and their test support.
// Every other package (api, processing, sweeping, agents, counters, console, verify, ...) declares
// the interfaces it uses and is handed a store by wire: it never names one.
var mayImportStores = []string{
	"internal/mysql", "internal/wire", "internal/local", "internal/migration", "internal/bench",
	"internal/chaos", "internal/testdb", "cmd/", "functions/",
}

// The consumers of the stores name no store: a package outside mayImportStores whose non-test
// files import the core or a store package fails. `go list` reports a package's non-test imports
// in Imports.
func TestOnlyAssemblersImportTheStores(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		pkg = strings.TrimPrefix(pkg, module)
		if allowed(pkg) {
			continue
		}
		checked++
		for _, imp := range strings.Fields(imports) {
			if imp == module+"internal/mysql" || strings.HasPrefix(imp, module+"internal/mysql/") {
				t.Errorf("%s imports %s: a consumer declares the interface it uses and wire hands it a store", pkg, imp)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d packages: the listing is broken", checked)
	}
	// The rule itself: it refuses a consumer and allows an assembler.
	if allowed("internal/api") || allowed("internal/processing") || !allowed("internal/mysql/eventstore") || !allowed("cmd/agent") {
		t.Fatal("mayImportStores allows the wrong packages")
	}
}

func allowed(pkg string) bool {
	for _, p := range mayImportStores {
		if pkg == p || strings.HasPrefix(pkg, p+"/") || (strings.HasSuffix(p, "/") && strings.HasPrefix(pkg, p)) {
			return true
		}
	}
	return false
}
