package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/repo"
)

// make invoke FN=<function> sends every sample of the function: each file of events/ is one
// function's (named <function>.json or <function>-*.json), and each function has one at least.
func TestEverySampleBelongsToOneFunction(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(repo.Root(), "functions"))
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		got, err := samples(repo.Root(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Errorf("function %s has no sample in events/", e.Name())
		}
		for _, p := range got {
			if o, ok := owner[p]; ok {
				t.Errorf("%s is both %s's and %s's sample", p, o, e.Name())
			}
			owner[p] = e.Name()
		}
	}
	all, err := filepath.Glob(filepath.Join(repo.Root(), "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if owner[p] == "" {
			t.Errorf("%s is no function's sample: make invoke never sends it (name it <function>-*.json)", filepath.Base(p))
		}
	}
}
