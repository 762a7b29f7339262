package boot

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/exactlyonce/exactlyonce/internal/config"
	drv "github.com/go-sql-driver/mysql"
)

// The server's answers to a connection that names a database it cannot open: 1049 when the
// database does not exist; 1044 when the user has no privilege on it (MySQL and MariaDB answer this
// to such a user whether the database exists or not, so as not to tell).
const (
	ErrUnknownDatabase      = 1049
	errDatabaseAccessDenied = 1044
)

// DatabaseError returns err, from opening the database c names, with what to do added when the
// server said that the database does not exist or that the user may not use it; any other error
// unchanged. The driver's error stays in the chain (errors.As finds the *mysql.MySQLError).
func DatabaseError(c config.DB, err error) error {
	var me *drv.MySQLError
	if !errors.As(err, &me) || (me.Number != ErrUnknownDatabase && me.Number != errDatabaseAccessDenied) {
		return err
	}
	name, user, setting := Database(c, me)
	if me.Number == ErrUnknownDatabase {
		return fmt.Errorf("database %q does not exist on the server: create it (CREATE DATABASE %s), "+
			"or point %s at a database that exists: %w", name, Ident(name), setting, err)
	}
	return fmt.Errorf("user %q may not use database %q, or it does not exist: create it if it does not "+
		"(CREATE DATABASE %s) and grant the user its privileges on it (GRANT ALL ON %s.* TO ...), or point %s "+
		"at a database the user may use: %w", user, name, Ident(name), Ident(name), setting, err)
}

// Database returns the name of the database c names, its user, and the variable that names it.
// The name is c's, or, when c leaves it to the store's default, the one the server's message quotes.
func Database(c config.DB, me *drv.MySQLError) (name, user, setting string) {
	name, user, setting = c.Name, c.User, "DB_NAME"
	if c.DSN != "" {
		setting = "DB_DSN"
		if cfg, err := drv.ParseDSN(c.DSN); err == nil {
			name, user = cfg.DBName, cfg.User
		}
	}
	if name == "" {
		// "Unknown database 'x'", "Access denied for user 'u'@'h' to database 'x'".
		if q := quotedInMessage().FindAllStringSubmatch(me.Message, -1); len(q) > 0 {
			name = q[len(q)-1][1]
		}
	}
	return name, user, setting
}

// quotedInMessage is compiled at its first use, an error's, not at every cold start.
var quotedInMessage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`'([^']*)'`) })

// Ident quotes a database name for a statement.
func Ident(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }
