package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
)

// scratch is a database the benchmark creates and drops.
type scratch struct {
	admin *sql.DB
	name  string
	dsn   string
}

func serverVersion(ctx context.Context, serverDSN string) (string, error) {
	cfg, err := drv.ParseDSN(serverDSN)
	if err != nil {
		return "", err
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var v string
	var pool, redo int64
	// The version, and the two InnoDB settings that decide whether a write-heavy run is bound by the
	// server's page flushing (scripts/mariadb.sh says why it sets them): figures are comparable only
	// between servers configured alike.
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_log_file_size").Scan(&v, &pool, &redo); err != nil {
		return "", fmt.Errorf("no database server at %s (run `make db`, or set BENCH_DB_DSN): %w", cfg.Addr, err)
	}
	return fmt.Sprintf("%s, innodb_buffer_pool_size %d MiB, innodb_log_file_size %d MiB", v, pool>>20, redo>>20), nil
}

// newScratch creates an empty database bench_<label>_<random> and, if migrate, applies the schema.
func (r *run) newScratch(ctx context.Context, label string, migrate bool) (*scratch, error) {
	cfg, err := drv.ParseDSN(r.cfg.ServerDSN)
	if err != nil {
		return nil, err
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &scratch{admin: admin, name: "bench_" + label + "_" + hex.EncodeToString(b)}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+s.name); err != nil {
		admin.Close()
		return nil, err
	}
	cfg.DBName = s.name
	s.dsn = cfg.FormatDSN()
	if migrate {
		db, err := s.open(2)
		if err != nil {
			s.drop()
			return nil, err
		}
		defer db.Close()
		if err := mysql.Migrate(ctx, db); err != nil {
			s.drop()
			return nil, fmt.Errorf("migrate %s: %w", s.name, err)
		}
	}
	return s, nil
}

// open returns a pool on the scratch database with the store's connection settings.
func (s *scratch) open(maxOpen int) (*sql.DB, error) {
	return mysql.Open(mysql.ConnConfig{DSN: s.dsn, MaxOpenConns: maxOpen})
}

// scratchStore makes a migrated scratch database and a store on a pool of maxOpen connections to
// it; done closes the pool and drops the database.
func (r *run) scratchStore(ctx context.Context, label string, maxOpen int) (store *wire.Stores, db *sql.DB, done func(), err error) {
	s, err := r.newScratch(ctx, label, true)
	if err != nil {
		return nil, nil, nil, err
	}
	if db, err = s.open(maxOpen); err != nil {
		s.drop()
		return nil, nil, nil, err
	}
	done = func() { db.Close(); s.drop() }
	if store, err = wire.StoresOn(db, mysql.Config{}); err != nil {
		done()
		return nil, nil, nil, err
	}
	return store, db, done, nil
}

// drop drops the database, whatever state the run is in.
func (s *scratch) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+s.name)
	s.admin.Close()
}

// servedDB is a scratch database with a store on it, served by the API handler over HTTP on a
// loopback port (the idem and reads groups).
type servedDB struct {
	url   string
	store *wire.Stores
	stop  func()
}

// serveScratch makes a migrated scratch database, runs seed on its pool (nil: nothing), and serves
// the API handler on it. stop closes the server and the pool and drops the database.
func (r *run) serveScratch(ctx context.Context, label string, seed func(*sql.DB) error) (*servedDB, error) {
	s, err := r.newScratch(ctx, label, true)
	if err != nil {
		return nil, err
	}
	pool, err := s.open(stackPoolSize)
	if err != nil {
		s.drop()
		return nil, err
	}
	stop := func() { pool.Close(); s.drop() }
	if seed != nil {
		if err := seed(pool); err != nil {
			stop()
			return nil, err
		}
	}
	store, err := wire.StoresOn(pool, mysql.Config{})
	if err != nil {
		stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stop()
		return nil, err
	}
	srv := httpserver.New(&api.Server{Stores: store.API()})
	go func() { _ = srv.Serve(ln) }()
	return &servedDB{url: "http://" + ln.Addr().String(), store: store, stop: func() { srv.Close(); stop() }}, nil
}
