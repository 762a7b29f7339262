package repo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Tool is a program the repository builds from its own module under tools/ (pinned there) into
// bin/: the local SQS and S3 endpoints, the Lambda emulator.
type Tool struct {
	Env  string // a variable naming a binary to use instead (SQSLOCAL_BIN, ...)
	Name string // its file in bin/
	Dir  string // its module, under tools/
	Pkg  string // what `go build` builds in Dir ("." for the module's own main)
}

var toolBuilds sync.Mutex // one build at a time: two callers wanting a missing tool build it once

// Binary returns the tool's path: the one its variable names, else bin/<Name>, built from
// tools/<Dir> if missing.
func (t Tool) Binary() (string, error) {
	if p := os.Getenv(t.Env); p != "" {
		return p, nil
	}
	bin := filepath.Join(Root(), "bin", t.Name)
	toolBuilds.Lock()
	defer toolBuilds.Unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "build", "-o", bin, t.Pkg)
	cmd.Dir = filepath.Join(Root(), "tools", t.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tools/%s: %v\n%s", t.Dir, err, out)
	}
	return bin, nil
}
