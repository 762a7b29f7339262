package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// WaitsForALock tells whether the transaction of connection id (CONNECTION_ID()) waits for a row
// lock now: how a test that forces an interleaving knows the call it runs has reached the lock the
// test holds.
//
// It reads SHOW ENGINE INNODB STATUS, not information_schema.INNODB_TRX: the server answers
// INNODB_TRX from a cache that it refreshes only when nobody has read it for 100 ms, so tests
// polling it side by side keep each other's view of a new lock wait from ever appearing (a CI run
// waited 10 s for a wait that had begun). The status is built when it is asked for.
//
// One sample is not proof that a statement is blocked: an UPDATE whose scan passes a row another
// transaction holds is listed in LOCK WAIT for the moment it reads that row's last committed
// version, and then goes on without waiting if the row does not match (docs/innodb.md). A test
// that needs to know the call waits for a row the test holds should hold a row the call matches.
func WaitsForALock(ctx context.Context, db *sql.DB, id int64) (bool, error) {
	var typ, name, status string
	if err := db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return false, fmt.Errorf("SHOW ENGINE INNODB STATUS: %w", err)
	}
	return statusShowsLockWait(status, id), nil
}

// StatementWaitsForALock tells whether a connection of db's database other than not, running a
// statement whose text begins with prefix, waits for a row lock now (WaitsForALock): how a test
// knows another process's statement has reached the lock a third one holds. False when no such
// statement runs.
func StatementWaitsForALock(ctx context.Context, db *sql.DB, not int64, prefix string) (bool, error) {
	var waiter int64
	err := db.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> ? "+
		"AND INFO LIKE CONCAT(?, '%') LIMIT 1", not, prefix).Scan(&waiter)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return WaitsForALock(ctx, db, waiter)
}

// threadID finds the line naming a transaction's connection ("MariaDB thread id 12, ...", "MySQL
// thread id 12, ..." on MySQL).
var threadID = regexp.MustCompile(`(?m)^(?:MariaDB|MySQL) thread id (\d+),`)

// statusShowsLockWait tells whether the transactions section of an InnoDB status lists connection
// id's transaction with a "LOCK WAIT" line.
func statusShowsLockWait(status string, id int64) bool {
	want := fmt.Sprint(id)
	for _, trx := range strings.Split(status, "\n---TRANSACTION ")[1:] {
		m := threadID.FindStringSubmatch(trx)
		if m == nil || m[1] != want {
			continue
		}
		for _, line := range strings.Split(trx, "\n") {
			if strings.HasPrefix(line, "LOCK WAIT ") {
				return true
			}
		}
		return false
	}
	return false
}

// ConnectionGone tells whether the server has let connection id (CONNECTION_ID()) go: after a test
// SIGKILLs the process that held it, the server rolls its transaction back and releases its locks
// once it notices, and not before.
func ConnectionGone(ctx context.Context, db *sql.DB, id int64) (bool, error) {
	var alive int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&alive); err != nil {
		return false, err
	}
	return alive == 0, nil
}
