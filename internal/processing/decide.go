package processing

import (
	"context"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// claimRun is one claim as the engine runs it: the claim the store writes under, and what its
// decisions use.
type claimRun struct {
	exactlyonce.Claim
	works    exactlyonce.Works
	backoff  exactlyonce.Backoff
	delivers bool // tasks are delivered (Engine.Tasks); otherwise left for one that does
	// tasks says whether this claim takes tasks: the engine delivers them and, for a claim of due
	// events, its deadline leaves the time for one (Engine.TimeForTask). A claim that does not take
	// them leaves them as they are.
	tasks bool
	// leasedAt is a moment before the claim's transaction, so before the lease it writes begins: a
	// delivery of a task it leased ends by leasedAt + Lease (leaseEnd).
	leasedAt time.Time
}

// decide is the engine's Decide: what becomes of each event the claim locked, in the claim's
// transaction. A task is leased when the claim takes tasks (the engine delivers them, tasks.go, in
// the time it has), else left as it is: a failure recorded here would settle a task without handing
// its reference on. An event of a kind
// with no work fails as failed work does. Inline work is done here, under the rows' locks, and its
// event settled or its failure recorded; other work is leased, to be done outside any transaction.
func (c claimRun) decide(ctx context.Context, claimed []exactlyonce.Event) []exactlyonce.Decision {
	out := make([]exactlyonce.Decision, len(claimed))
	for i, ev := range claimed {
		w, ok := c.works[ev.Kind]
		switch {
		case ev.Kind == exactlyonce.KindTask:
			if c.tasks {
				out[i].Action = exactlyonce.Lease
			}
		case !ok:
			out[i] = exactlyonce.Decision{Action: exactlyonce.Fail, Failure: c.failure(ev, noWork(ev.Kind))}
		case w.Inline():
			res, err := w.Do(ctx, ev)
			if err != nil {
				out[i] = exactlyonce.Decision{Action: exactlyonce.Fail, Failure: c.failure(ev, err)}
				continue
			}
			out[i] = exactlyonce.Decision{Action: exactlyonce.Settle, Value: res.Value}
		default:
			out[i].Action = exactlyonce.Lease
		}
	}
	return out
}

// failure is what the failed attempt of ev's work comes to under the claim's backoff: the event
// waits a random time that grows with its attempts, or, its attempts spent, fails for good.
func (c claimRun) failure(ev exactlyonce.Event, err error) exactlyonce.Failure {
	attempt := ev.Attempts + 1
	if c.backoff.GivesUp(attempt) {
		return exactlyonce.Failure{Final: true, Err: err}
	}
	return exactlyonce.Failure{Wait: c.backoff.Delay(attempt), Err: err}
}

func noWork(k exactlyonce.Kind) error { return fmt.Errorf("no work for events of kind %q", k) }
