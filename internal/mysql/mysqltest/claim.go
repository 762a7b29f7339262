package mysqltest

import (
	"context"

	"github.com/exactlyonce/exactlyonce"
)

// LeaseAll is a claim's Decide for tests that take the store's claim without the engine: it leases
// every event the claim locked, tasks included, as an engine that delivers them does.
func LeaseAll(_ context.Context, claimed []exactlyonce.Event) []exactlyonce.Decision {
	out := make([]exactlyonce.Decision, len(claimed))
	for i := range out {
		out[i].Action = exactlyonce.Lease
	}
	return out
}

// SettleAll returns a claim's Decide for tests that take the store's claim without the engine: it
// settles every event the claim locked, in the claim's transaction, with value(id).
func SettleAll(value func(id int64) string) exactlyonce.Decide {
	return func(_ context.Context, claimed []exactlyonce.Event) []exactlyonce.Decision {
		out := make([]exactlyonce.Decision, len(claimed))
		for i, ev := range claimed {
			out[i] = exactlyonce.Decision{Action: exactlyonce.Settle, Value: value(ev.ID)}
		}
		return out
	}
}
