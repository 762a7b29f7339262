package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/rand/v2"
	"strings"
	"time"
)

// keyedSession is where a keyed create's transaction runs its statements: a *sql.Tx, one round trip
// per statement (txSession), or a connection to which the transaction is sent as two texts of
// several statements, two round trips in all (textSession).
type keyedSession interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	exec(ctx context.Context, q string, args ...any) error
}

type txSession struct{ *sql.Tx }

func (t txSession) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.ExecContext(ctx, q, args...)
	return err
}

// textSession sends a transaction in two texts: the first query (the buckets' lock) after
// SET TRANSACTION ISOLATION LEVEL READ COMMITTED and START TRANSACTION, and every write after
// it, held back, with the COMMIT (commit). A query between them (a replay's FindKeys) is a round
// trip of its own. Every statement's text is the code's own (sql/*.sql) and every argument is
// escaped by the driver (interpolateParams), as for single statements.
type textSession struct {
	conn    *sql.Conn
	begun   bool // the transaction was sent: it is open on conn until committed or rolled back
	pending []string
	args    []any
}

// statementSeparator joins the statements of one text; internal/fault's proxy splits them on it.
const statementSeparator = ";\n"

func (t *textSession) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if !t.begun {
		t.begun = true
		q = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED" + statementSeparator + "START TRANSACTION" + statementSeparator + q
	}
	// The driver skips the results of the statements that return no rows.
	return t.conn.QueryContext(ctx, q, args...)
}

func (t *textSession) exec(_ context.Context, q string, args ...any) error {
	t.pending = append(t.pending, q)
	t.args = append(t.args, args...)
	return nil
}

// commit sends the writes held back and the COMMIT, in one text.
func (t *textSession) commit(ctx context.Context) error {
	q := strings.Join(append(t.pending, "COMMIT"), statementSeparator)
	_, err := t.conn.ExecContext(ctx, q, t.args...)
	if err == nil {
		t.begun = false
	}
	return err
}

// inText runs fn on a connection of its own as a textSession and commits what it wrote, with the
// store's transaction shape: READ COMMITTED, rolled back on any error (or, if that fails, the
// connection dropped, which rolls it back), run again after a deadlock or a lock wait timeout, up
// to the retry policy's bound. fn returning errNothingToWrite rolls back.
func (s *Store) inText(ctx context.Context, fn func(keyedSession) error) error {
	policy := s.retry.withDefaults()
	delay := policy.BaseDelay
	for attempt := 1; ; attempt++ {
		err := s.textOnce(ctx, fn)
		if err == nil || errors.Is(err, errNothingToWrite) || !s.stats.retryable(err) {
			return err
		}
		if attempt >= policy.MaxAttempts {
			s.stats.GaveUp.Add(1)
			return err
		}
		s.stats.Retries.Add(1)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(delay)) + 1)):
		}
		delay = min(2*delay, policy.MaxDelay)
	}
}

func (s *Store) textOnce(ctx context.Context, fn func(keyedSession) error) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	t := &textSession{conn: conn}
	defer func() {
		if t.begun {
			// Never return a connection to the pool with a transaction open on it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, rerr := conn.ExecContext(rctx, "ROLLBACK"); rerr != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
			cancel()
		}
		conn.Close()
	}()
	if err := fn(t); err != nil {
		return err
	}
	return t.commit(ctx)
}
