package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rule is a make rule's first line with its `## ` description: the targets `make help` lists.
var rule = regexp.MustCompile(`^([^\s:=#]+):[^=].*## `)

// `make help` lists every target that has a description, whatever characters its name holds:
// its pattern took letters, '_' and '-' only, so `s3local` (a digit) was missing from the list.
func TestMakeHelpListsEveryDescribedTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	files, err := filepath.Glob(filepath.Join(Root(), "*.mk"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range append([]string{filepath.Join(Root(), "Makefile")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if m := rule.FindStringSubmatch(l); m != nil {
				want = append(want, m[1])
			}
		}
	}
	if len(want) < 10 {
		t.Fatalf("found %d described targets, fewer than the Makefile has: %q", len(want), want)
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "help")
	cmd.Dir = Root()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			listed[f[0]] = true
		}
	}
	for _, target := range want {
		if !listed[target] {
			t.Errorf("make help does not list %s:\n%s", target, out)
		}
	}
}
