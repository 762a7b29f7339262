package testdb

// The pool of migrated databases behind DB and Store.
//
// Migrating a new database costs 15-25 s on the 2-core CI machine and dropping it 5 s more: the
// schema has about 2,500 partitions, each an InnoDB file (157 MB in all), and the suite asks for
// hundreds of databases. So a test leases a database that is already migrated and gives it back:
//
//   - The template, tdb_<key>_tpl, is migrated once per server by the real migrations (mysql.Migrate,
//     rules check included), under a named lock so that one process migrates while the others wait.
//     <key> hashes the migration files, so changed migrations get a new template and new members.
//   - A member, tdb_<key>_<random>, is a copy of the template: CREATE TABLE ... LIKE (which copies the
//     partitioning) and the template's rows. A test holds the member's named lock (GET_LOCK, on a
//     connection kept open) for as long as it runs; a process that dies releases it with its
//     connection.
//   - Each lease puts the member back into the template's state before the test sees it: the
//     connections still on it are killed, its schema is compared with the template's (the tables,
//     SHOW CREATE TABLE of each, no trigger, routine or event), and every table's rows are made the
//     template's: emptied, and the seeded ones (the buckets, the id counter) copied again unless they
//     hold the template's rows already (the same row count and CHECKSUM TABLE: two reads, where
//     copying their 20,500 rows took 0.14 s of the server's CPU, most of a lease). A member whose
//     schema a test changed is dropped and another is made; so is one whose files a test grew
//     (errGrown), so that the pool's size stays its members' count times the template's (about
//     160 MB).
//
// So a test sees exactly what a fresh migration leaves (TestLeasedDatabaseIsAFreshMigration), and
// the members outlive the run: the next `go test` leases them at once. They are dropped when the
// migrations change (gc), or by `scripts/mariadb.sh drop-test-databases`.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	drv "github.com/go-sql-driver/mysql"
)

// prefix starts the name of every database of the pool; NewDatabase's start with "t_".
const prefix = "tdb_"

// staleAfter is how long another key's template is kept after it was made: a checkout with other
// migrations (another branch) may still be using it.
const staleAfter = 24 * time.Hour

// lockWait is how long one GET_LOCK waits before it is asked again. Waiting for a lock is waiting
// for a condition (another process migrating the template), so there is no overall deadline: the
// test binary's -timeout is the bound.
const lockWait = 30

// pool is the process's view of the pool on one server.
type pool struct {
	admin *sql.DB // the server, no database; never closed (the process's lifetime)
	cfg   *drv.Config
	key   string
	tpl   string

	mu    sync.Mutex
	shape *shape // the template's, read once
}

// shape is what a member must match: the database's options and each table's definition.
type shape struct {
	database string  // SHOW CREATE DATABASE, the name removed
	tables   []table // by name
	size     int64   // the template's: see size
}

type table struct {
	name, create string
	seeded       bool    // the template holds rows: a member gets them back at each lease
	rows         rowsSum // the template's rows of a seeded table (read once, with the shape)
}

// rowsSum is a table's row count and CHECKSUM TABLE: a member's seeded table that has the
// template's is left as it is at a lease instead of being copied again (pool_member.go, reset).
type rowsSum struct{ count, checksum int64 }

var (
	poolOnce sync.Once
	thePool  *pool
	poolErr  error
)

// getPool opens the process's pool on ServerDSN.
func getPool() (*pool, error) {
	poolOnce.Do(func() {
		cfg, err := drv.ParseDSN(ServerDSN())
		if err != nil {
			poolErr = fmt.Errorf("TEST_DB_DSN: %w", err)
			return
		}
		cfg.DBName = ""
		key, err := migrationsKey()
		if err != nil {
			poolErr = err
			return
		}
		admin, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			poolErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.PingContext(ctx); err != nil {
			admin.Close()
			poolErr = fmt.Errorf("no database server at %s (%v): run `make test`, or `scripts/mariadb.sh ensure-test`, or set TEST_DB_DSN",
				cfg.Addr, err)
			return
		}
		thePool = &pool{admin: admin, cfg: cfg, key: key, tpl: prefix + key + "_tpl"}
	})
	return thePool, poolErr
}

// migrationsKey hashes the migration files (names and contents) that mysql.Migrate embeds, read
// from the source tree beside this package: changed migrations, a new template.
func migrationsKey() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testdb: cannot locate its source to find the migrations")
	}
	dir := filepath.Join(filepath.Dir(self), "..", "mysql", "migrations")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("testdb: read the migrations to key the template: %w", err)
	}
	h := sha256.New()
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
		n++
	}
	if n == 0 {
		return "", fmt.Errorf("testdb: no migrations in %s", dir)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func lockName(db string) string { return "exactlyonce.testdb." + db }

// getLock takes a named lock on conn, waiting as long as it takes.
func getLock(ctx context.Context, conn *sql.Conn, name string) error {
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, lockWait).Scan(&got); err != nil {
			return fmt.Errorf("take lock %s: %w", name, err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
	}
}

// tryLock takes a named lock on conn if it is free.
func tryLock(ctx context.Context, conn *sql.Conn, name string) (bool, error) {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil {
		return false, fmt.Errorf("take lock %s: %w", name, err)
	}
	return got.Valid && got.Int64 == 1, nil
}

func releaseLock(ctx context.Context, conn *sql.Conn, name string) {
	_, _ = conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", name)
}

// lease is a member held by one test.
type lease struct {
	name string
	conn *sql.Conn // holds the member's lock
	how  string    // what it took: "reused" or "made from the template"
}

// lease returns a member in the template's state, locked for the caller until release.
func (p *pool) lease(ctx context.Context) (*lease, error) {
	if _, err := p.templateShape(ctx); err != nil {
		return nil, err
	}
	members, err := p.members(ctx, p.key)
	if err != nil {
		return nil, err
	}
	shuffle(members)
	for _, m := range members {
		conn, err := p.admin.Conn(ctx)
		if err != nil {
			return nil, err
		}
		got, err := tryLock(ctx, conn, lockName(m))
		if err != nil || !got {
			conn.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		if err := p.resetOwn(ctx, conn, m); err != nil {
			// Not the template's schema any more (a test changed it), grown, or gone: drop it, try
			// the next.
			if _, derr := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+m); derr != nil {
				conn.Close()
				return nil, fmt.Errorf("drop %s after %v: %w", m, err, derr)
			}
			conn.Close()
			continue
		}
		return &lease{name: m, conn: conn, how: "reused"}, nil
	}
	return p.newMember(ctx)
}

// release gives the member back: the connections the test left on it are killed (so that nothing
// of this test writes into the next one's), then its lock is released with its connection.
func (l *lease) release(ctx context.Context) error {
	defer l.conn.Close()
	return killConnections(ctx, l.conn, l.name)
}

// resetOwn is reset, then the member's own archive identity (ownArchiveID): what a lease hands out.
func (p *pool) resetOwn(ctx context.Context, conn *sql.Conn, db string) error {
	if err := p.reset(ctx, conn, db); err != nil {
		return err
	}
	return p.ownArchiveID(ctx, conn, db)
}

// newMember makes a member from the template. The member exists before the template's lock is
// released, so gc, which drops a template only under its lock and only when no member exists, never
// drops a template a member is being copied from.
func (p *pool) newMember(ctx context.Context) (*lease, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + p.key + "_" + hex.EncodeToString(b)
	conn, err := p.admin.Conn(ctx)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*lease, error) {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+name)
		conn.Close()
		return nil, fmt.Errorf("make test database %s: %w", name, err)
	}
	if err := getLock(ctx, conn, lockName(name)); err != nil {
		return fail(err)
	}
	s, err := p.withTemplate(ctx, func(s *shape) error {
		_, err := conn.ExecContext(ctx, "CREATE DATABASE "+name)
		return err
	})
	if err != nil {
		return fail(err)
	}
	for _, t := range s.tables {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s.`%s` LIKE %s.`%s`", name, t.name, p.tpl, t.name)); err != nil {
			return fail(err)
		}
	}
	if err := p.resetOwn(ctx, conn, name); err != nil {
		return fail(err)
	}
	return &lease{name: name, conn: conn, how: "made from the template"}, nil
}

// templateShape makes sure the template is migrated and returns its shape.
func (p *pool) templateShape(ctx context.Context) (*shape, error) {
	p.mu.Lock()
	s := p.shape
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	return p.withTemplate(ctx, nil)
}

// withTemplate takes the template's lock, migrates the template if it is not (creating it if it is
// not there), reads its shape once per process, and runs f (if not nil) before releasing the lock.
func (p *pool) withTemplate(ctx context.Context, f func(*shape) error) (*shape, error) {
	conn, err := p.admin.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := getLock(ctx, conn, lockName(p.tpl)); err != nil {
		return nil, err
	}
	defer releaseLock(context.WithoutCancel(ctx), conn, lockName(p.tpl))

	var existed int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
		p.tpl).Scan(&existed); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+p.tpl); err != nil {
		return nil, err
	}
	cfg := p.cfg.Clone()
	cfg.DBName = p.tpl
	tdb, err := mysql.Open(mysql.ConnConfig{DSN: cfg.FormatDSN(), MaxOpenConns: 2})
	if err != nil {
		return nil, err
	}
	defer tdb.Close()
	// No deadline: a migration that is merely slow (a loaded machine) must not fail a test. When the
	// template is migrated already this is one read.
	if err := mysql.Migrate(ctx, tdb); err != nil {
		return nil, fmt.Errorf("migrate the template %s: %w", p.tpl, err)
	}
	p.mu.Lock()
	s := p.shape
	p.mu.Unlock()
	if s == nil {
		if s, err = readShape(ctx, conn, p.tpl); err != nil {
			return nil, fmt.Errorf("read the template %s: %w", p.tpl, err)
		}
		if s.size, err = size(ctx, conn, p.tpl); err != nil {
			return nil, fmt.Errorf("read the template %s: %w", p.tpl, err)
		}
		for i, t := range s.tables {
			if t.seeded {
				if s.tables[i].rows, err = sumRows(ctx, conn, p.tpl, t.name); err != nil {
					return nil, fmt.Errorf("read the template %s: %w", p.tpl, err)
				}
			}
		}
		p.mu.Lock()
		p.shape = s
		p.mu.Unlock()
	}
	if f != nil {
		if err := f(s); err != nil {
			return nil, err
		}
	}
	if existed == 0 {
		// New migrations: the databases of the old ones are garbage once nobody uses them.
		p.gc(ctx)
	}
	return s, nil
}

// members lists the pool's members of one key (the template excluded).
func (p *pool) members(ctx context.Context, key string) ([]string, error) {
	rows, err := p.admin.QueryContext(ctx,
		"SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?",
		strings.ReplaceAll(prefix+key+"_", "_", `\_`)+"%")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		if n != prefix+key+"_tpl" {
			out = append(out, n)
		}
	}
	return out, rows.Err()
}

// gc drops the databases of other keys (other migrations) whose template was made more than
// staleAfter ago, or is gone, and that no test holds. Best effort: what it cannot drop now it
// drops another time.
func (p *pool) gc(ctx context.Context) {
	rows, err := p.admin.QueryContext(ctx, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?",
		strings.ReplaceAll(prefix, "_", `\_`)+"%")
	if err != nil {
		return
	}
	keys := map[string]bool{}
	for rows.Next() {
		var n string
		if rows.Scan(&n) == nil {
			if k, _, ok := strings.Cut(strings.TrimPrefix(n, prefix), "_"); ok && k != p.key {
				keys[k] = true
			}
		}
	}
	rows.Close()
	conn, err := p.admin.Conn(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	for k := range keys {
		tpl := prefix + k + "_tpl"
		var made sql.NullTime
		_ = conn.QueryRowContext(ctx, `SELECT MIN(CREATE_TIME) FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'schema_migrations'`, tpl).Scan(&made)
		if made.Valid && time.Since(made.Time) < staleAfter {
			continue
		}
		dropFree := func() (left int) {
			ms, err := p.members(ctx, k)
			if err != nil {
				return 1
			}
			for _, m := range ms {
				if got, err := tryLock(ctx, conn, lockName(m)); err != nil || !got {
					left++
					continue
				}
				if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+m); err != nil {
					left++
				}
				releaseLock(ctx, conn, lockName(m))
			}
			return left
		}
		if dropFree() > 0 {
			continue
		}
		// The template goes under its lock, and only when no member is left: members are made (and
		// created as databases) under the same lock.
		if got, err := tryLock(ctx, conn, lockName(tpl)); err != nil || !got {
			continue
		}
		if ms, err := p.members(ctx, k); err == nil && len(ms) == 0 {
			_, _ = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+tpl)
		}
		releaseLock(ctx, conn, lockName(tpl))
	}
}

func shuffle(s []string) {
	b := make([]byte, len(s))
	_, _ = rand.Read(b)
	for i := len(s) - 1; i > 0; i-- {
		j := int(b[i]) % (i + 1)
		s[i], s[j] = s[j], s[i]
	}
}
