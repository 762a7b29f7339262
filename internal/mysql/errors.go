package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"

	"github.com/exactlyonce/exactlyonce"
	"github.com/go-sql-driver/mysql"
)

// Interpret maps a driver error to a domain error once, here, naming the operation op: a database
// that cannot be reached or is overloaded becomes EUNAVAILABLE (the caller may retry); a domain
// error stays as it is; anything else stays internal. The original error is kept for logs;
// exactlyonce.ErrorMessage never shows it to a caller. A nil error stays nil.
func Interpret(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *exactlyonce.Error
	if errors.As(err, &de) {
		return err
	}
	var ne net.Error
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn), errors.As(err, &ne),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, sql.ErrConnDone):
		return &unavailableError{op: op, err: err}
	case errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout ||
		me.Number == 1040 /* too many connections */ || me.Number == 1053 /* server shutdown */):
		return &unavailableError{op: op, err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unavailableError is an EUNAVAILABLE domain error that keeps the driver error for logs.
type unavailableError struct {
	op  string
	err error
}

func (e *unavailableError) Error() string { return e.op + ": database unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{e.err, exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the database is unavailable; try again")}
}

// IsUnavailable tells whether err means the database could not be reached or is overloaded (a
// refused or cut connection, a timeout, too many connections, a shutdown in progress): a condition
// that may pass, unlike a broken statement or a broken schema rule.
func IsUnavailable(err error) bool {
	return err != nil && exactlyonce.ErrorCode(Interpret("", err)) == exactlyonce.EUNAVAILABLE
}

// IsLockWaitTimeout tells whether err is the server's lock wait timeout (innodb_lock_wait_timeout
// passed while a statement waited for a row lock), which InTx runs its transaction again for.
func IsLockWaitTimeout(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errLockWaitTimeout
}
