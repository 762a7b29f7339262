package metrics

import (
	"strings"
	"unicode"
)

// Part is a part of the system that publishes metrics: the FunctionName dimension's function on
// Lambda, the label `part` on Prometheus.
type Part string

// The parts.
const (
	PartAPI       Part = "api"
	PartProcessor Part = "processor"
	PartSweeper   Part = "sweeper"
	PartCounter   Part = "counter"
	PartAgent     Part = "agent" // a standalone agent (cmd/agent): the sweeper's work, outside Lambda
)

// Kind says how a metric's values combine.
type Kind uint8

const (
	// Counter values add up: an invocation publishes their sum (Prometheus: a counter, _total).
	Counter Kind = iota
	// Gauge is one value at a time: an invocation publishes the last set (Prometheus: a gauge).
	Gauge
	// Duration values are each published (an EMF array; Prometheus: a histogram in seconds,
	// _seconds). Recorded with ObserveDuration; the unit is Milliseconds.
	Duration
	// Distribution values are each published (an EMF array; Prometheus: a histogram), in the
	// metric's unit. Recorded with Observe.
	Distribution
)

// Metric names one definition of the Catalog.
type Metric uint8

// The metrics. Their names, units and meaning are the Catalog's; the EMF names are CloudWatch's,
// which the alarms and the dashboard read (infra/): never rename one.
const (
	EventsCreatedSync Metric = iota
	EventsCreatedAsync
	IdempotentReplays
	EventsProcessed
	ClaimBatchSize
	OutcomeBusy
	OutcomeMissing
	DeadlockRetries
	LockWaitRetries
	TransactionDuration
	Transactions
	QueueSends
	QueueSendFailures
	PendingEvents
	OldestPendingAge
	Settled
	SweepErrors
	RetryingEvents
	FailedEvents
	PulseFailures
	CounterMismatches
	CounterRepublished
	CounterSweepErrors
	AgentPulses
	ShardChanges
	TaskDelivered
	TaskDeliveryFailed
	TaskDeliveryLatency
	CounterApplied
	CounterDuplicates
	CounterRejected

	numMetrics
)

// Def is the definition of one metric.
type Def struct {
	// Name is the EMF (CloudWatch) name; Prometheus's is PromName's.
	Name string
	Unit Unit
	Kind Kind
	Help string
	// Parts are the parts that publish it: on Lambda an invocation's line holds every metric of its
	// part, zero when nothing happened (a datapoint says "none", a missing one says "not
	// measured"), and any other metric recorded in it.
	Parts []Part
}

var (
	writers  = []Part{PartAPI, PartProcessor, PartSweeper, PartCounter, PartAgent}
	claimers = []Part{PartProcessor, PartSweeper, PartAgent}
	api      = []Part{PartAPI}
	sweeper  = []Part{PartSweeper}
	agents   = []Part{PartSweeper, PartAgent}
	counter  = []Part{PartCounter}
)

// Catalog holds every metric's definition, indexed by Metric. Every part records through it.
var Catalog = [numMetrics]Def{
	EventsCreatedSync:   {"EventsCreatedSync", Count, Counter, "Events stored by POST /events.", api},
	EventsCreatedAsync:  {"EventsCreatedAsync", Count, Counter, "Events stored by POST /events/async (tasks included).", api},
	IdempotentReplays:   {"IdempotentReplays", Count, Counter, "Keyed requests answered from a stored response.", api},
	EventsProcessed:     {"EventsProcessed", Count, Counter, "Events settled as processed.", claimers},
	ClaimBatchSize:      {"ClaimBatchSize", Count, Distribution, "Events taken by each claim.", claimers},
	OutcomeBusy:         {"OutcomeBusy", Count, Counter, "Events found leased or locked by another claim.", claimers},
	OutcomeMissing:      {"OutcomeMissing", Count, Counter, "Ids named by a message but not stored.", claimers},
	DeadlockRetries:     {"DeadlockRetries", Count, Counter, "Transactions retried after a deadlock (1213).", writers},
	LockWaitRetries:     {"LockWaitRetries", Count, Counter, "Transactions retried after a lock wait timeout (1205).", writers},
	TransactionDuration: {"TransactionDuration", Milliseconds, Duration, "Duration of committed write transactions.", writers},
	Transactions:        {"Transactions", Count, Counter, "Committed write transactions (exact; TransactionDuration keeps a sample of at most 100 per line).", writers},
	QueueSends:          {"QueueSends", Count, Counter, "Messages sent to the events queue.", api},
	QueueSendFailures:   {"QueueSendFailures", Count, Counter, "Sends to the events queue that failed (the sweeper finds their events).", api},
	PendingEvents:       {"PendingEvents", Count, Gauge, "Events waiting to be claimed (open partition: pending, or leased with an expired lease), read after the sweep.", sweeper},
	OldestPendingAge:    {"OldestPendingAgeSeconds", Seconds, Gauge, "Age of the oldest event waiting to be claimed, read after the sweep.", sweeper},
	Settled:             {"Settled", Count, Counter, "Events the sweep settled.", sweeper},
	SweepErrors:         {"SweepErrors", Count, Counter, "Sweeps that failed.", sweeper},
	RetryingEvents:      {"RetryingEvents", Count, Counter, "Events whose work failed and that wait their backoff.", sweeper},
	FailedEvents:        {"FailedEvents", Count, Counter, "Events whose work failed for the last allowed time.", sweeper},
	PulseFailures:       {"PulseFailures", Count, Counter, "Agent pulses that failed.", agents},
	CounterMismatches:   {"CounterMismatches", Count, Counter, "Counts the reconciliation found wrong.", nil},
	CounterRepublished:  {"CounterNotificationsRepublished", Count, Counter, "Counter notifications the sweep published.", nil},
	CounterSweepErrors:  {"CounterSweepErrors", Count, Counter, "Counter sweeps with a failed step.", nil},
	AgentPulses:         {"AgentPulses", Count, Counter, "Agent pulses made.", agents},
	ShardChanges:        {"ShardChanges", Count, Counter, "Times an agent's assigned range changed.", agents},
	TaskDelivered:       {"TaskDelivered", Count, Counter, "Webhook deliveries answered 2xx.", claimers},
	TaskDeliveryFailed:  {"TaskDeliveryFailed", Count, Counter, "Webhook deliveries that failed (retried, or failed for good).", claimers},
	TaskDeliveryLatency: {"TaskDeliveryLatency", Milliseconds, Duration, "Duration of each webhook delivery attempt.", claimers},
	CounterApplied:      {"CounterApplied", Count, Counter, "Counter messages applied.", counter},
	CounterDuplicates:   {"CounterDuplicates", Count, Counter, "Counter messages already applied (deduplicated).", counter},
	CounterRejected:     {"CounterRejected", Count, Counter, "Counter messages rejected (a bad message).", counter},
}

// Def returns m's definition.
func (m Metric) Def() Def { return Catalog[m] }

// Name returns m's EMF name.
func (m Metric) Name() string { return Catalog[m].Name }

// PromName returns m's Prometheus name: exactlyonce_ and the EMF name in snake case, with _total
// for a counter and _seconds for a duration (a Seconds gauge already ends in _seconds).
func (m Metric) PromName() string {
	d := Catalog[m]
	var b strings.Builder
	b.WriteString("exactlyonce_")
	for i, r := range d.Name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	switch d.Kind {
	case Counter:
		b.WriteString("_total")
	case Duration:
		b.WriteString("_seconds")
	}
	return b.String()
}

// PublishedBy says whether part p publishes m.
func (m Metric) PublishedBy(p Part) bool {
	for _, q := range Catalog[m].Parts {
		if q == p {
			return true
		}
	}
	return false
}
