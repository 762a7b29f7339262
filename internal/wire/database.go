package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	drv "github.com/go-sql-driver/mysql"
)

// The server's answers to a connection that names a database it cannot open: 1049 when the
// database does not exist; 1044 when the user has no privilege on it (MySQL and MariaDB answer this
// to such a user whether the database exists or not, so as not to tell).
const (
	errUnknownDatabase      = 1049
	errDatabaseAccessDenied = 1044
)

// DatabaseError returns err, from opening the database c names, with what to do added when the
// server said that the database does not exist or that the user may not use it; any other error
// unchanged. The driver's error stays in the chain (errors.As finds the *mysql.MySQLError).
func DatabaseError(c config.DB, err error) error {
	var me *drv.MySQLError
	if !errors.As(err, &me) || (me.Number != errUnknownDatabase && me.Number != errDatabaseAccessDenied) {
		return err
	}
	name, user, setting := database(c, me)
	if me.Number == errUnknownDatabase {
		return fmt.Errorf("database %q does not exist on the server: create it (CREATE DATABASE %s), "+
			"or point %s at a database that exists: %w", name, ident(name), setting, err)
	}
	return fmt.Errorf("user %q may not use database %q, or it does not exist: create it if it does not "+
		"(CREATE DATABASE %s) and grant the user its privileges on it (GRANT ALL ON %s.* TO ...), or point %s "+
		"at a database the user may use: %w", user, name, ident(name), ident(name), setting, err)
}

// database returns the name of the database c names, its user, and the variable that names it.
// The name is c's, or, when c leaves it to the store's default, the one the server's message quotes.
func database(c config.DB, me *drv.MySQLError) (name, user, setting string) {
	name, user, setting = c.Name, c.User, "DB_NAME"
	if c.DSN != "" {
		setting = "DB_DSN"
		if cfg, err := drv.ParseDSN(c.DSN); err == nil {
			name, user = cfg.DBName, cfg.User
		}
	}
	if name == "" {
		// "Unknown database 'x'", "Access denied for user 'u'@'h' to database 'x'".
		if q := quotedInMessage.FindAllStringSubmatch(me.Message, -1); len(q) > 0 {
			name = q[len(q)-1][1]
		}
	}
	return name, user, setting
}

var quotedInMessage = regexp.MustCompile(`'([^']*)'`)

// ident quotes a database name for a statement.
func ident(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// OpenLocalStores is OpenStores for the local runner (cmd/local): if the database DB_DSN names does
// not exist, it creates it (CREATE DATABASE IF NOT EXISTS) when the user may, logs that it did, and
// opens it. When the user may not, or the database is named by DB_HOST and DB_NAME rather than
// DB_DSN, the error names the database and says what to do, as OpenStores's does. The functions
// never create their database: in AWS it is the cluster's, created with it.
func OpenLocalStores(ctx context.Context, c config.Config, log *slog.Logger) (*Stores, error) {
	store, err := OpenStores(ctx, c)
	var me *drv.MySQLError
	if err == nil || c.DB.DSN == "" || !errors.As(err, &me) || me.Number != errUnknownDatabase {
		return store, err
	}
	name, user, _ := database(c.DB, me)
	if cerr := createDatabase(ctx, c.DB, name); cerr != nil {
		return nil, fmt.Errorf("database %q does not exist on the server, and user %q may not create it (%v): "+
			"create it as a user who may (CREATE DATABASE %s), or point DB_DSN at a database that exists: %w",
			name, user, cerr, ident(name), me)
	}
	log.Info("local: created the database, which did not exist", "database", name)
	return OpenStores(ctx, c)
}

// createDatabase creates database name on the server of c.DSN, as its user.
func createDatabase(ctx context.Context, c config.DB, name string) error {
	cfg, err := drv.ParseDSN(c.DSN)
	if err != nil {
		return err
	}
	cfg.DBName = "" // connect to the server, not to the database that is missing
	conn := Conn(c)
	conn.DSN, conn.MaxOpenConns = cfg.FormatDSN(), 1
	db, err := mysql.Open(conn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+ident(name))
	return err
}
