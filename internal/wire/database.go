package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire/boot"
	drv "github.com/go-sql-driver/mysql"
)

// DatabaseError is boot.DatabaseError.
func DatabaseError(c config.DB, err error) error { return boot.DatabaseError(c, err) }

// OpenLocalStores is OpenStores for the local runner (cmd/local): if the database DB_DSN names does
// not exist, it creates it (CREATE DATABASE IF NOT EXISTS) when the user may, logs that it did, and
// opens it. When the user may not, or the database is named by DB_HOST and DB_NAME rather than
// DB_DSN, the error names the database and says what to do, as OpenStores's does. The functions
// never create their database: in AWS it is the cluster's, created with it.
func OpenLocalStores(ctx context.Context, c config.Config, log *slog.Logger) (*Stores, error) {
	store, err := OpenStores(ctx, c)
	var me *drv.MySQLError
	if err == nil || c.DB.DSN == "" || !errors.As(err, &me) || me.Number != boot.ErrUnknownDatabase {
		return store, err
	}
	name, user, _ := boot.Database(c.DB, me)
	if cerr := createDatabase(ctx, c.DB, name); cerr != nil {
		return nil, fmt.Errorf("database %q does not exist on the server, and user %q may not create it (%v): "+
			"create it as a user who may (CREATE DATABASE %s), or point DB_DSN at a database that exists: %w",
			name, user, cerr, boot.Ident(name), me)
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
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+boot.Ident(name))
	return err
}
