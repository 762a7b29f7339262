package pagestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
)

// TestMain runs the tests, or, started again by a test in the child role "mover", a process that
// moves pages to the archive as the sweeper does, or in the role "packer", one that packs the
// folded history into pages as the sweeper does; either stops for good at the step KILL_AT, for
// the test to kill it there. In the role "heap-packer" it packs once with its heap sampled
// (packHeap), for TestAPackOfLargePayloadsIsBoundedByBytes.
func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

func runChild(role string) int {
	if role != "mover" && role != "packer" && role != "heap-packer" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if role == "heap-packer" {
		if err := packHeap(store); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	killAt := os.Getenv("KILL_AT")
	if role == "packer" {
		ctx := pagestore.WithPackSteps(context.Background(), func(_ *sql.Tx, step string) {
			if step == killAt {
				fmt.Printf("at %s\n", step)
				select {} // until killed
			}
		})
		units, _, err := store.Pages.PackPages(ctx, 1000, time.Hour)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("done: %d units\n", units)
		return 0
	}
	ctx := pagestore.WithArchiveSteps(context.Background(), func(page int64, step string) {
		if step == killAt {
			fmt.Printf("at %s of page %d\n", step, page)
			select {} // until killed
		}
	})
	res, err := store.Pages.ArchivePages(ctx, 0, time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("done: %d pages\n", res.Pages)
	return 0
}
