package mysql

import "github.com/exactlyonce/exactlyonce"

// IsUnavailable tells whether err means the database could not be reached or is overloaded (a
// refused or cut connection, a timeout, too many connections, a shutdown in progress): a condition
// that may pass, unlike a broken statement or a broken schema rule.
func IsUnavailable(err error) bool {
	return err != nil && exactlyonce.ErrorCode(interpret("", err)) == exactlyonce.EUNAVAILABLE
}
