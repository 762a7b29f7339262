// Package mysql is the core every store of the system is built on, against MySQL 8 (Aurora MySQL
// 3) and MariaDB 10.11: what all of them share, and nothing that belongs to one of them.
//
//   - Connections (db.go): Open and Connector, each session pinned to UTC and READ COMMITTED.
//   - The one transaction shape (tx.go): DB.InTx, retried after a deadlock or a lock wait timeout;
//     and the same on connections with autocommit off (manualtx.go), DB.InManualTx.
//   - The error mapping (errors.go): Interpret turns a driver error into a domain error once;
//     IsUnavailable tells a database that may come back from a broken statement.
//   - The id counter (allocator.go, status.sql): DB.TakeIDs hands out event ids, in blocks or one
//     transaction at a time; AdvanceCounter takes them inside a caller's transaction.
//   - The schema (schema.go, migrations/): Migrate, and the rules it checks (CheckRules: no key,
//     index, auto-increment, trigger, routine, view, scheduled event or sequence), with the one-row
//     tables it keeps right (status, settled_count.sql).
//   - The functions' database users (users.go, users.sql).
//   - The query files (queries.go): each store's typed query set is Go that querygen writes from the
//     .sql files beside it (go generate), CheckQueries checks it against them, and ExpandIDs and the
//     like write what a statement's arguments decide.
//
// A DB is the handle of one process: New builds it on a pool, with the process's id allocator and
// retry policy, and every feature store is built on it (internal/mysql/eventstore, taskstore,
// keystore, counterstore, agentstore, pagestore), so that they share one allocator, one pool and
// one set of retry counters. internal/wire builds them; internal/mysql/mysqltest holds what only
// tests, the benchmark and the chaos run use (seeding, the audit, statement counting).
//
// # The SQL files and their names
//
// Every statement lives in a .sql file beside the Go that runs it, one file per table, with the
// reason for every lock it takes next to it. A `-- name: X` line names a statement, and each package
// holds its statements in a struct with one string field per name: the Go code says
// queries.ClaimDue, never a string, so a misspelt name does not compile. The struct's value is
// generated Go (`go generate ./internal/mysql/...` runs querygen, which writes queries_gen.go from
// the .sql files), so that no process parses SQL when it starts: the functions' start-up is judged
// against a hello world's, and parsing the files at every initialisation took about half a
// millisecond. A statement without a field does not compile once generated; a field without a
// statement, a name given twice, or a .sql file edited and not generated again fails the package's
// generated test (queries_gen_test.go, CheckQueries against the embedded files). A test of this
// package (TestEveryQueryIsUsed) fails for a field that no code reads.
//
// sqlc, which River uses to type its queries, was considered and not taken: it generates a Go
// function per statement from a fixed text, and many of these texts are completed at run time: IN
// lists and multi-row VALUES of any length, CASE lists of one WHEN per row (/*cases*/), the packed
// history's column names chosen from ids (/*columns*/), the partitions' literal states of a listing
// (/*states*/), and account names in the users' GRANTs (/*user*/), which sqlc cannot type either.
// Its IN-list support covers only the first of these, and its batch inserts for MySQL use LOAD DATA,
// a different statement. So the statements stay named SQL files, checked as above.
package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"time"
)

// queryTexts are the core's statements: the id counter's (status.sql), settled_count's row's
// (settled_count.sql) and the database users' (users.sql).
type queryTexts struct {
	LockCounter, AdvanceCounter, ReadCounter, CounterRows, LargestEventID, SeedCounter string

	SettledCountRows, CountSettledEvents, SeedSettledCount string

	CreateUserIAM, CreateUserPassword, AlterUserPassword string

	GrantReadInsertEvents, GrantAdvanceCounter, GrantClaimSettleEvents, GrantReadSettledCount,
	GrantFoldSettledCount, GrantLockCounterBuckets, GrantWriteCounterDirectories, GrantWriteCounterSums,
	GrantInsertCounterFacts, GrantRecordCounterNotifications, GrantReadCounterSums, GrantSweepCounterFacts,
	GrantSweepCounterNotifications, GrantKeyBuckets, GrantReadInsertKeys, GrantPruneKeys, GrantAgents,
	GrantReadAgents, GrantTaskBuckets, GrantRecordAttempts, GrantReadAttempts, GrantRetryTasks,
	GrantEventWorkers, GrantRunEventWorkers, GrantReadEventWorkers, GrantReadPages, GrantPackPages,
	GrantPackTurn, GrantDeletePackedEvents, GrantPackAttempts, GrantArchivePages, GrantArchiveCursor, GrantReadArchiveCursor,
	GrantReferenceDirectory, GrantLogReferenceDirectory, GrantCompactReferenceDirectory, GrantReadReferenceBackfill,
	GrantReferenceBackfill string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:*.sql

// Config configures a DB.
type Config struct {
	// Allocator is AllocatorBlock (default) or AllocatorLiteral.
	Allocator string
	// BlockSize is the number of ids AllocatorBlock reserves per status-row transaction. Default
	// DefaultBlockSize.
	BlockSize int
	// BlockMaxAge is how long AllocatorBlock hands out a block's ids after it reserved it; the next
	// create after that drops it and reserves a fresh one. Default DefaultBlockMaxAge.
	BlockMaxAge time.Duration
	// Retry bounds the retries of deadlocked or timed-out transactions.
	Retry RetryPolicy
}

// DB is the core handle the stores are built on: a pool, the id allocator, the retry policy and
// counters of every transaction, and the connections with autocommit off. Safe for concurrent use;
// build one per process (New), and every store of the process on it.
type DB struct {
	pool  *sql.DB
	alloc allocator
	stats *Stats
	retry RetryPolicy
	// manual holds the connections with autocommit off that InManualTx runs on (manualtx.go).
	manual *manualConns
}

// New returns the handle on pool, which must be migrated (Migrate) and come from Open or
// OpenConnector (its sessions at READ COMMITTED and in UTC).
func New(pool *sql.DB, cfg Config) (*DB, error) {
	d := &DB{pool: pool, stats: &Stats{}, retry: cfg.Retry.withDefaults(), manual: &manualConns{db: pool}}
	switch cmp.Or(cfg.Allocator, DefaultAllocator) {
	case AllocatorBlock:
		size := cmp.Or(cfg.BlockSize, DefaultBlockSize)
		if size < 1 {
			return nil, fmt.Errorf("allocator block size must be positive, got %d", size)
		}
		maxAge := cmp.Or(cfg.BlockMaxAge, DefaultBlockMaxAge)
		if maxAge < 0 {
			return nil, fmt.Errorf("allocator block max age must be positive, got %s", maxAge)
		}
		d.alloc = &blockAllocator{db: pool, stats: d.stats, retry: d.retry, size: int64(size), maxAge: maxAge, now: time.Now}
	case AllocatorLiteral:
		d.alloc = &literalAllocator{}
	default:
		return nil, fmt.Errorf("unknown allocator %q (want %q or %q)", cfg.Allocator, AllocatorBlock, AllocatorLiteral)
	}
	return d, nil
}

// Pool returns the pool the handle uses, for a statement that runs outside any transaction.
func (d *DB) Pool() *sql.DB { return d.pool }

// Stats returns the retry counters of the handle's transactions.
func (d *DB) Stats() StatsSnapshot { return d.stats.Snapshot() }

// InTx runs fn in one transaction of the one shape (tx.go): begun at READ COMMITTED, committed, rolled
// back on any error, run again after a deadlock or a lock wait timeout. fn must be safe to run again,
// touching the database only through tx. The error is the driver's (or fn's): the caller
// interprets it (Interpret), naming its operation.
func (d *DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, d.pool, d.stats, d.retry, fn)
}

// InManualTx is InTx on a connection whose session has autocommit off (manualtx.go): the first
// statement of fn opens the transaction, one round trip fewer than InTx's START TRANSACTION. For a
// hot path whose transactions are a few statements (the keyed creates).
func (d *DB) InManualTx(ctx context.Context, fn func(tx Conn) error) error {
	return inManualTx(ctx, d.manual, d.stats, d.retry, fn)
}
