package e2e

import (
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// The end-to-end flows of flows.go against the local system (the API over HTTP, the processor
// behind the local event source mapping, the sweeper), on goaws and MariaDB. The LocalStack tests
// (localstack/e2e_test.go) run the same flows through LocalStack.
func TestFlowsAgainstTheLocalSystem(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 1, 2)
	sys := startSystem(t, q, store, 2*time.Second)
	tg := Target{APIURL: sys.URL, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL,
		Settle: 30 * time.Second, PoisonSettle: 30 * time.Second, Exclusive: true}
	t.Run("creates", func(t *testing.T) { FlowCreates(t, tg, 8, 10) })
	t.Run("duplicate messages", func(t *testing.T) { FlowDuplicateMessages(t, tg) })
	t.Run("poison", func(t *testing.T) { FlowPoison(t, tg) })
	// The flows saw each event's process_count through the API (all a deployed target shows); here
	// the processor's and the sweeper's own reports say each event was settled once.
	sys.requireSettledOnce(t)
}
