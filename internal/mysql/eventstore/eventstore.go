// Package eventstore is the events and their claims (events.sql, count.sql, metrics.sql): the
// plain creates, an event and the listings (reading the packed history through pagestore after
// `events`), the exact count and the sweeper's fold into it, the overview and the waiting gauges,
// and the claims: ClaimIDs and ClaimDue lock claimable events with SKIP LOCKED and, in the claim's
// transaction, write what the engine's Decide says of each (settle, record a failure, lease, or
// leave); Settle, Fail and Release end a lease, guarded by its holder, writing what the engine
// decided; Outcomes tells what an id a claim did not take is. The store runs no work and picks no
// retry: internal/processing decides.
//
// It depends on the core and on pagestore. taskstore builds on its transaction-level functions
// (LockLeased, FailLeased, SetValues, ScanLeasedEvents, StoredState): a task is an event, and its
// settlement settles the event's row as these do.
package eventstore

// queryTexts are the statements of events.sql, count.sql, metrics.sql and tiers.sql.
type queryTexts struct {
	InsertProcessed, InsertPendingRows, Get, ListEvents, ClaimIDs, ClaimableIDs, ClaimDue, ClaimedTasks, Lease, MarkProcessed, LockLeased, LeasedIDs, SettleLeased, Release, FailClaimed, FailLeased, OpenStates string

	LockSettledCount, CountUnfolded, FoldSettled, AddSettled, LockSettledCountAt, OverviewCounts string

	OldestWaitingAge, WaitingEvents string

	TierArchive, TierRows, PageRowsEstimate string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:events.sql,count.sql,metrics.sql,tiers.sql
