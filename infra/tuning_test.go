package infra

import "testing"

// Tests of tuning.go: the numbers that must agree with each other beyond one construct.

// TestConnectionBudget is the arithmetic of docs/deploy.md: in the worst case (every client session
// pinned by RDS Proxy) the capped writers plus a realistic api concurrency fit in the proxy's share of
// Aurora's max_connections at the maximum ACU.
func TestConnectionBudget(t *testing.T) {
	maxConnections := auroraMySQLMaxConnections(maxACU)
	budget := maxConnections * proxyMaxConnsPercent / 100
	// Each shard's tick overlaps the next one by at most one invocation (the hand-over), and at most
	// maxSweeperShards shards are allowed.
	const sweeperOverlap = 2
	workers := processorConcurrency*processorMaxOpenConns + maxSweeperShards*sweeperOverlap*sweeperMaxOpenConns + migrateMaxOpenConns
	apiEnvs := (budget - workers) / apiMaxOpenConns
	t.Logf("max_connections≈%d, proxy budget %d, processor+sweeper+migrate %d, room for %d concurrent api environments", maxConnections, budget, workers, apiEnvs)
	if workers > budget/2 {
		t.Errorf("the batch workers may hold %d of %d connections; keep them under half", workers, budget)
	}
	// The api's concurrency ≈ rate x latency: at the throttle's burst with a 100 ms request it needs burst/10.
	if need := apiBurstLimit / 10; apiEnvs < need {
		t.Errorf("room for %d api environments, want at least %d", apiEnvs, need)
	}
}

// auroraMySQLMaxConnections is Aurora MySQL's default max_connections formula,
// GREATEST(log2(mem/805306368)*45, log2(mem/8187281408)*1000), for a Serverless v2 instance whose
// memory is 2 GiB per ACU of its maximum capacity, less about 10% the engine keeps for itself.
func auroraMySQLMaxConnections(acu float64) int {
	mem := acu * 2 * (1 << 30) * 0.9
	a := log2(mem/805306368) * 45
	b := log2(mem/8187281408) * 1000
	if b > a {
		a = b
	}
	return int(a)
}

func log2(x float64) float64 {
	n := 0.0
	for x >= 2 {
		x /= 2
		n++
	}
	// linear interpolation inside the last octave is close enough for a budget
	return n + (x - 1)
}
