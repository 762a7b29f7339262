package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The processor's init builds no SQS client: it calls SQS only to extend the visibility of a batch
// slower than its heartbeat (VISIBILITY_HEARTBEAT, 10 s), and the cold start paid for the AWS
// configuration and the client (docs/performance.md, "Lambda start-up"). Nor the archive's S3
// client (HISTORY_BUCKET), built at the first read of an archived page. Shown with an AWS
// configuration that cannot be loaded (AWS_MAX_ATTEMPTS=x, which config.LoadDefaultConfig
// refuses): the bootstrap, run as Lambda runs it, handles a batch. Before, init loaded the
// configuration and failed, and with it every invocation.
func TestTheProcessorBuildsNoClientAtInit(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the processor function's bootstrap")
	}
	ctx := context.Background()
	bootstrap, err := rie.BuildBootstrap(ctx, repo.Root(), "processor", t.TempDir())
	require.NoError(t, err)
	_, dsn := testdb.DB(t, 2)
	f, err := rie.Start(rie.Config{Bootstrap: bootstrap, Function: "processor", Timeout: 30 * time.Second,
		Env: []string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "LOG_LEVEL=info", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:9",
			"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_MAX_ATTEMPTS=x",
			// The archive's S3 client too is built at its first call (wire.Archive), not at init.
			"HISTORY_BUCKET=history", "AWS_ENDPOINT_URL_S3=http://127.0.0.1:9"}})
	require.NoError(t, err)
	t.Cleanup(f.Stop)
	raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", "processor-batch.json"))
	require.NoError(t, err)
	// A bound, not a pause: the invocation returns as soon as the function answers.
	ictx, cancel := context.WithTimeout(ctx, f.Timeout+time.Minute)
	defer cancel()
	res, err := f.Invoke(ictx, raw, "")
	require.NoError(t, err)
	require.Nil(t, res.Error, "%v\n%s", res.Error, strings.Join(f.Output(), "\n"))
	require.Contains(t, string(res.Payload), "batchItemFailures", string(res.Payload))
}
