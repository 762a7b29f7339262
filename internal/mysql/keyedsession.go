package mysql

import (
	"context"
	"database/sql"
)

// keyedSession is where a keyed create's transaction runs its statements: a *sql.Tx, one round trip
// per statement (txSession). (A session that sent the transaction as two multi-statement texts was
// tried and removed: it needs multiStatements on every connection, and whether RDS Proxy passes such
// texts without pinning is unverified; docs/performance.md.)
type keyedSession interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	exec(ctx context.Context, q string, args ...any) error
}

type txSession struct{ *sql.Tx }

func (t txSession) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.ExecContext(ctx, q, args...)
	return err
}
