package wire_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// initBytesLimit is the most a package of this module may allocate while it initialises. Every
// function's bootstrap runs every such initialisation before it can take its first event, and the
// bootstraps' start-up is judged against a hello world's (docs/performance.md, "Lambda start-up"):
// parsing the stores' .sql files at initialisation allocated 20-90 KB a package and took about half
// a millisecond in all, the pages' CRC table 9 KB and 0.1 ms. Work that size belongs in generated
// code (the query sets, go generate) or on first use when the first event does not need it.
const initBytesLimit = 4 << 10

// initBytesAllowed are the packages allowed more, and how much: statement texts they write once
// from constants, which their first statement needs (ClaimDue over each range of subpartitions,
// 8.5 KB; the packed history's reference read over its 100 columns, 17.4 KB).
var initBytesAllowed = map[string]int{
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore": 12 << 10,
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore":  24 << 10,
}

// No package of this module that a function links allocates more than initBytesLimit at its
// initialisation (initBytesAllowed, for the few that may). This test binary links every package the functions take from this module (they
// are built from internal/wire); GODEBUG=inittrace=1 reports each package's initialisation with the
// bytes it allocated, a count that does not depend on the machine's speed.
func TestPackageInitialisationAllocatesLittle(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	line := regexp.MustCompile(`(?m)^init (github\.com/exactlyonce/exactlyonce/\S+) @.*, (\d+) bytes, \d+ allocs$`)
	found := 0
	for _, m := range line.FindAllStringSubmatch(stderr.String(), -1) {
		found++
		limit := initBytesLimit
		if l, ok := initBytesAllowed[m[1]]; ok {
			limit = l
		}
		if n, _ := strconv.Atoi(m[2]); n > limit {
			t.Errorf("%s allocates %d bytes at initialisation, more than %d", m[1], n, limit)
		}
	}
	if found < 5 {
		t.Fatalf("found %d packages of this module in the init trace: the trace is not read right:\n%s", found, stderr.String())
	}
}
