package testdb_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The package is for tests only: no package's non-test files import it, so that no command or
// function (which are built from non-test files) carries test databases. `go list` reports a
// package's non-test imports in Imports, its tests' in TestImports and XTestImports.
func TestOnlyTestFilesImportTestdb(t *testing.T) {
	t.Parallel()
	const self = "github.com/exactlyonce/exactlyonce/internal/testdb"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/exactlyonce/exactlyonce/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if imp == self {
				t.Errorf("%s imports %s outside its tests", pkg, self)
			}
		}
	}
}
