package main

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The processor's init builds no SQS client: it calls SQS only to extend the visibility of a batch
// slower than its heartbeat (VISIBILITY_HEARTBEAT, 10 s), and the cold start paid for the AWS
// configuration and the client (docs/performance.md, "Lambda start-up"). Nor the archive's S3
// client (HISTORY_BUCKET), built at the first read of an archived page. Shown with an AWS
// configuration that cannot be loaded (rie.UnloadableAWS: AWS_MAX_ATTEMPTS=x): the bootstrap, run
// as Lambda runs it, handles a batch. Before, init loaded the configuration and failed, and with it
// every invocation.
func TestTheProcessorBuildsNoClientAtInit(t *testing.T) {
	t.Parallel()
	rie.SkipShort(t, "processor")
	_, dsn := testdb.DB(t, 2)
	f := rie.StartTest(t, "processor", append([]string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "LOG_LEVEL=info"}, rie.UnloadableAWS...)...)
	res := f.InvokeSample(t, "processor-batch.json")
	require.Contains(t, string(res.Payload), "batchItemFailures", string(res.Payload))
}
