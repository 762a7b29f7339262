// Package testdb gives each test a real, isolated database on MariaDB/MySQL: DB and Store a migrated
// one of its own (leased from a pool of migrated databases, see pool.go), NewDatabase an empty one
// with a unique name, dropped when the test ends. Nothing here is a mock.
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
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	drv "github.com/go-sql-driver/mysql"
)

// TestServerDSN is the tests' own server, which `scripts/mariadb.sh ensure-test` (run by `make test`)
// provides: a MariaDB like the shared one whose files are in memory, where making a database costs
// no disk writes.
const TestServerDSN = "exactlyonce:exactlyonce@tcp(127.0.0.1:13306)/"

// DefaultDSN is the shared server `scripts/mariadb.sh ensure` provides (`make run`'s), which tests
// use when the tests' server is not running.
const DefaultDSN = config.LocalServerDSN

var (
	serverOnce sync.Once
	serverDSN  string
)

// ServerDSN returns the DSN of the server tests create their databases on: TEST_DB_DSN; else
// TestServerDSN if that server answers; else DefaultDSN. Both are real MariaDB servers with the same
// configuration; only where their files live differs. Its database part is ignored.
func ServerDSN() string {
	if v := os.Getenv("TEST_DB_DSN"); v != "" {
		return v
	}
	serverOnce.Do(func() {
		serverDSN = DefaultDSN
		db, err := sql.Open("mysql", TestServerDSN)
		if err != nil {
			return
		}
		defer db.Close()
		// Nothing listening is refused at once; the bound is for a server that hangs.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if db.PingContext(ctx) == nil {
			serverDSN = TestServerDSN
		}
	})
	return serverDSN
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
	ping, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ping); err != nil {
		t.Fatalf("no database server at %s (%v): run `make test`, or `scripts/mariadb.sh ensure-test`, or set TEST_DB_DSN",
			cfg.Addr, err)
	}
	// No deadline on creating and dropping: slow on a loaded machine, never wrong.
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// DB returns a pool on a migrated database of its own, closed when the test ends. The database is
// leased from a pool of migrated databases (pool.go) and is in exactly the state a fresh migration
// leaves; the test may change its rows and its schema freely.
func DB(t testing.TB, maxOpen int) (*sql.DB, string) {
	t.Helper()
	p, err := getPool()
	if err != nil {
		t.Fatal(err)
	}
	// No deadline: making a database is slow on a loaded machine, never wrong; go test's -timeout
	// bounds a server that does not answer.
	ctx := context.Background()
	start := time.Now()
	l, err := p.lease(ctx)
	if err != nil {
		t.Fatalf("lease a migrated test database: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Logf("testdb: %s leased in %v (%s)", l.name, took.Round(time.Millisecond), l.how)
	}
	t.Cleanup(func() {
		if err := l.release(ctx); err != nil {
			t.Logf("release test database %s: %v", l.name, err)
		}
	})
	cfg := p.cfg.Clone()
	cfg.DBName = l.name
	dsn := cfg.FormatDSN()
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
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
