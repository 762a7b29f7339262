package chaos_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/chaos"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests, or a process when the run starts this binary again as one.
func TestMain(m *testing.M) {
	_ = drv.SetLogger(stdlog.New(io.Discard, "", 0)) // connections the run cuts are expected
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(chaos.RunProcess(role))
	}
	os.Exit(m.Run())
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The checker must be able to fail: a short run (with kills and a database restart, under the
// race detector), then the invariants broken on purpose after the system settled, one of each
// kind; the report must name exactly those.
func TestChaosCheckerReportsEveryViolation(t *testing.T) {
	t.Parallel()
	rep, err := chaos.Run(context.Background(), chaos.Config{
		Duration: 6 * time.Second, Clients: 4, Processors: 1, Sweepers: 1, KillEvery: 2 * time.Second,
		DBRestarts: 1, Poison: 2, SweepGrace: time.Second, Visibility: 1, MaxReceive: 8, SQSEndpoint: localsqs.Endpoint(t), Log: logWriter{t},
		// The violations below are made in the events table: the history stays there, unpacked.
		KeepHistory: true,
		BeforeCheck: func(ctx context.Context, db *sql.DB, client *sqs.Client, q queue.Queues, reports string) error {
			// An async event settled twice, as a broken guard or a lost lock would let happen: it is
			// put back to pending behind the system's back (a plain one: this engine delivers no task), and a real process settles it again and
			// reports it. Only the processes' reports can tell (the table shows one settled event).
			if _, err := db.ExecContext(ctx, "UPDATE events SET state = 0, value = NULL, claim_id = NULL "+
				"WHERE processed_by IN ('processor', 'sweeper') AND kind = 'plain' LIMIT 1"); err != nil {
				return err
			}
			store, err := wire.StoresOn(db, mysql.Config{})
			if err != nil {
				return err
			}
			rep, err := verify.OpenFileReporter(filepath.Join(reports, "second.reports"))
			if err != nil {
				return err
			}
			b, err := (&processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Report: rep}).ProcessDue(ctx, 0, 10)
			if err != nil || b.Settled != 1 {
				return fmt.Errorf("settle the event again: %v, %+v", err, b)
			}
			if err := rep.Close(); err != nil {
				return err
			}
			for _, stmt := range []string{
				// an acknowledged event lost
				"DELETE FROM events WHERE processed_by = 'api' LIMIT 1",
				// an id stored twice (and GET /events back to the acknowledged number)
				"INSERT INTO events SELECT * FROM events WHERE processed_by = 'api' LIMIT 1",
				// a key stored twice, as a create sent again that missed its first attempt's commit
				// would leave it (with a second event: here the same one)
				"INSERT INTO idempotency_keys SELECT * FROM idempotency_keys LIMIT 1",
				// a stored key naming an event no client was told
				"UPDATE idempotency_keys SET event_id = 0 LIMIT 1",
			} {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
			// These statements moved rows in and out of the counted partition behind the count's
			// back (the system never deletes an event or un-settles one): the count's row is
			// re-created from the counted events, as migrate does for a lost one, so that GET /events
			// is exact again and only the violations made on purpose are reported.
			if _, err := db.ExecContext(ctx, "DELETE FROM settled_count"); err != nil {
				return err
			}
			if err := mysql.Migrate(ctx, db); err != nil {
				return err
			}
			// a good message in the DLQ
			_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(queue.Encode(1))})
			return err
		},
	})
	require.NoError(t, err)
	t.Log("\n" + rep.String())
	require.False(t, rep.OK())
	require.Equal(t, 1, rep.Duplicates)
	require.Equal(t, 1, rep.Lost)
	require.Equal(t, 1, rep.DuplicateIDs)
	want := []string{"settled more than once", "does not exist", "is stored twice", "the DLQ holds", "is stored 2 times", "which no client was told"}
	require.Len(t, rep.Violations, len(want), "only the violations made on purpose: %q", rep.Violations)
	for i, w := range want {
		require.True(t, strings.Contains(strings.Join(rep.Violations, "\n"), w), "violation %d %q reported in %q", i, w, rep.Violations)
	}
	require.Positive(t, rep.DBStops+rep.DBKills, "the database was restarted")
	require.Positive(t, rep.AsyncCreates)
	require.Positive(t, rep.KeyedCreates)
}

// The short chaos run, in a Go test (under the race detector): `make chaos-short` runs the same
// with bin/chaos as part of `make test`, so this one runs only when CHAOS_DURATION is set, e.g.
// CHAOS_DURATION=30s go test -run TestChaosShort ./internal/chaos
func TestChaosShort(t *testing.T) {
	t.Parallel()
	v := os.Getenv("CHAOS_DURATION")
	if v == "" {
		t.Skip("`make chaos-short` runs the short chaos run; set CHAOS_DURATION to run it here")
	}
	duration, err := time.ParseDuration(v)
	require.NoError(t, err)
	rep, err := chaos.Run(context.Background(), chaos.Config{
		Duration: duration, Clients: 6, Processors: 2, Sweepers: 2, KillEvery: time.Second, DBRestarts: 2, Poison: 4,
		Visibility: 2, MaxReceive: 8, RequireRetries: true, SQSEndpoint: localsqs.Endpoint(t), Log: logWriter{t},
	})
	require.NoError(t, err)
	t.Log("\n" + rep.String())
	require.True(t, rep.OK(), rep.String())
	require.Positive(t, rep.ProcessorKills, "processors were killed")
	require.Positive(t, rep.SweeperKills, "sweepers were killed")
	require.Positive(t, rep.APIKills, "API processes were killed")
	require.Positive(t, rep.PackerKills, "packers were killed")
	require.Positive(t, rep.LateCreates, "events were created with ids taken long before, while packers packed their units")
	require.Positive(t, rep.Retries, "transactions were retried")
	require.Positive(t, rep.DBStops+rep.DBKills, "the database was restarted")
	require.Positive(t, rep.AsyncCreates)
	require.Positive(t, rep.SyncCreates)
	require.Positive(t, rep.KeyedCreates, "creates were sent with an Idempotency-Key")
	require.Equal(t, rep.PoisonInjected, rep.PoisonInDLQ)
}
