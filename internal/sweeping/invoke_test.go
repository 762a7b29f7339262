package sweeping_test

import (
	"context"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

// testStopBefore is how long before its deadline a test's invocation leaves (Config.AgentStopBefore):
// more than the margin the line of metrics keeps for itself, so that the waiting events are read,
// and enough for the leaving and that read when a database shared by a parallel suite stalls for
// seconds (with 1 s, such a stall left a line without its age: "no time left to read the waiting
// events"). It costs a passing run nothing: the invocation returns once it has left and published.
const testStopBefore = 5 * time.Second

// fastAgent is the scheduled sweeper's agent of the tests: it pulses every 50 ms, so that it runs
// (and claims) within a few pulses of its invocation's start.
var fastAgent = agents.Config{Member: agents.MemberConfig{PulseInterval: 50 * time.Millisecond, Expiration: time.Second},
	PollInterval: 20 * time.Millisecond, PollJitter: 10 * time.Millisecond}

// scheduled returns cfg as a test's scheduled sweeper: fastAgent, leaving testStopBefore ahead of
// its deadline.
func scheduled(cfg sweeping.Config) sweeping.Config {
	cfg.Agent, cfg.AgentStopBefore = fastAgent, testStopBefore
	return cfg
}

// workWindow is the window of a test's invocation that must get work done: an invocation claims
// until its window ends, and a pulse can wait seconds for a database shared by a whole parallel
// suite on a 2-core machine (CI saw an invocation of 2 s end with no successful pulse), so it is
// wider than the work needs.
const workWindow = 5 * time.Second

// invoke runs one invocation of the scheduled sweeper s (HandleAgent, the Lambda's handler) that
// may claim for window: its deadline is window plus testStopBefore away.
func invoke(s *sweeping.Sweeper, window time.Duration) (sweeping.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), window+testStopBefore)
	defer cancel()
	return s.HandleAgent(ctx, sweeping.ShardInput{})
}
