package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
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
		if err := r.copyTemplate(ctx, admin, s.name); err != nil {
			s.drop()
			return nil, fmt.Errorf("migrated database %s: %w", s.name, err)
		}
	}
	return s, nil
}

// template is a run's migrated database, bench_tpl_<random>: every migrated scratch database of the
// run is a copy of it, its tables made with CREATE TABLE ... LIKE (which keeps the partitioning) and
// its rows copied, as the tests' databases are (internal/testdb). Migrating an empty database took
// 3-4 s on the machine of docs/performance.md (15-25 s on the CI machine: the schema has about
// 2,500 partitions, and the migrations rebuild `events` several times), a copy 0.6 s, and a smoke
// run makes dozens.
type template struct {
	mu     sync.Mutex
	name   string
	tables []string // every table
	seeded []string // the tables the migrations leave rows in (the id counter, the buckets, ...)
}

// copyTemplate makes the tables of the database name (created, empty) those of the run's template,
// migrated at the first call, rows included.
func (r *run) copyTemplate(ctx context.Context, admin *sql.DB, name string) error {
	t, err := r.template(ctx, admin)
	if err != nil {
		return err
	}
	for _, tb := range t.tables {
		if _, err := admin.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s.`%s` LIKE %s.`%s`", name, tb, t.name, tb)); err != nil {
			return err
		}
	}
	for _, tb := range t.seeded {
		if _, err := admin.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s.`%s` SELECT * FROM %s.`%s`", name, tb, t.name, tb)); err != nil {
			return err
		}
	}
	return nil
}

// template returns the run's template, migrating it (by the real migrations, rules check included)
// the first time.
func (r *run) template(ctx context.Context, admin *sql.DB) (*template, error) {
	t := &r.tpl
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.name != "" {
		return t, nil
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "bench_tpl_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	fail := func(err error) (*template, error) {
		_, _ = admin.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+name)
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	cfg, err := drv.ParseDSN(r.cfg.ServerDSN)
	if err != nil {
		return fail(err)
	}
	cfg.DBName = name
	db, err := mysql.Open(mysql.ConnConfig{DSN: cfg.FormatDSN(), MaxOpenConns: 2})
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db); err != nil {
		return fail(err)
	}
	rows, err := admin.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME", name)
	if err != nil {
		return fail(err)
	}
	var tables, seeded []string
	for rows.Next() {
		var tb string
		if err := rows.Scan(&tb); err != nil {
			rows.Close()
			return fail(err)
		}
		tables = append(tables, tb)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	for _, tb := range tables {
		var one int
		err := admin.QueryRowContext(ctx, fmt.Sprintf("SELECT 1 FROM %s.`%s` LIMIT 1", name, tb)).Scan(&one)
		if err == nil {
			seeded = append(seeded, tb)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return fail(err)
		}
	}
	t.name, t.tables, t.seeded = name, tables, seeded
	return t, nil
}

// dropTemplate drops the run's template, if it made one.
func (r *run) dropTemplate() {
	t := &r.tpl
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.name == "" {
		return
	}
	cfg, err := drv.ParseDSN(r.cfg.ServerDSN)
	if err != nil {
		return
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+t.name)
	t.name = ""
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
