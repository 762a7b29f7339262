// Package testdb gives each test a real, isolated database: a new MariaDB/MySQL database with a
// unique name, migrated, dropped when the test ends. Nothing here is a mock.
//
// It is for tests only: only _test.go files import it (it takes a testing.TB everywhere), so no
// command or function carries it. Commands that need a database of their own (the benchmark, the
// chaos run) create one the way their job needs.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	drv "github.com/go-sql-driver/mysql"
)

// DefaultDSN is the server `scripts/mariadb.sh ensure` (run by `make test`) provides.
const DefaultDSN = config.LocalServerDSN

// ServerDSN returns the DSN of the server tests create their databases on: TEST_DB_DSN, or DefaultDSN.
// Its database part is ignored.
func ServerDSN() string {
	if v := os.Getenv("TEST_DB_DSN"); v != "" {
		return v
	}
	return DefaultDSN
}

// NewDatabase creates an empty database with a unique name and drops it when the test ends. It
// returns the DSN of the new database.
func NewDatabase(t testing.TB) string {
	t.Helper()
	cfg, err := drv.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("TEST_DB_DSN: %v", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatalf("no database server at %s (%v): run `make test`, or `scripts/mariadb.sh ensure`, or set TEST_DB_DSN",
			cfg.Addr, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// DB returns a pool on a new, migrated database, closed when the test ends.
func DB(t testing.TB, maxOpen int) (*sql.DB, string) {
	t.Helper()
	dsn := NewDatabase(t)
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db, dsn
}

// Core returns the core handle (mysql.New, with cfg) on a new, migrated database: a test builds
// the stores it needs on it (eventstore.New and the like, or wire.NewStores for every one).
func Core(t testing.TB, cfg mysql.Config, maxOpen int) *mysql.DB {
	t.Helper()
	db, _ := DB(t, maxOpen)
	core, err := mysql.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return core
}

// UnreachableCore returns a core handle whose database refuses every connection, as when the server
// is down: nothing listens on port 1 of the loopback address.
func UnreachableCore(t testing.TB) *mysql.DB {
	t.Helper()
	db, err := mysql.Open(mysql.ConnConfig{DSN: "u:p@tcp(127.0.0.1:1)/x?timeout=1s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	core, err := mysql.New(db, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return core
}
