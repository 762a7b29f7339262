package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// grantingServer starts a private server that checks privileges, as Aurora does, with an admin
// user that may create users and grant (the cluster's admin user). It returns a DSN maker for
// database events on it.
//
// Privileges are checked on it from the start (fault.Server.CheckPrivileges).
func grantingServer(t *testing.T) func(user, password string) string {
	t.Helper()
	srv := fault.PrivateServer(t)
	ctx := context.Background()
	require.NoError(t, srv.CreateDatabase(ctx, "events"))
	srv.CheckPrivileges(t,
		"CREATE USER 'admin'@'%' IDENTIFIED BY 'admin-secret'",
		"GRANT ALL PRIVILEGES ON *.* TO 'admin'@'%' WITH GRANT OPTION")
	return func(user, password string) string {
		cfg := drv.NewConfig()
		cfg.User, cfg.Passwd = user, password
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", srv.Addr(), "events"
		cfg.Timeout = 2 * time.Second
		return cfg.FormatDSN()
	}
}

// migratedWithUsers is a granting server's database, migrated, with the function users given; it
// returns the server's DSN for a user and the administrator's pool (closed when the test ends).
func migratedWithUsers(t *testing.T, users ...mysql.FunctionUser) (func(user, password string) string, *sql.DB) {
	t.Helper()
	dsn := grantingServer(t)
	admin, err := mysql.Open(mysql.ConnConfig{DSN: dsn("admin", "admin-secret")})
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	require.NoError(t, mysql.Migrate(ctx, admin))
	require.NoError(t, mysql.EnsureUsers(ctx, admin, users))
	return dsn, admin
}

func openAs(t *testing.T, dsn string, cfg mysql.Config) *wire.Stores {
	t.Helper()
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := wire.StoresOn(db, cfg)
	require.NoError(t, err)
	return store
}

// requireDenied runs stmt and requires the server to refuse it for lack of a privilege.
func requireDenied(t *testing.T, db *sql.DB, stmt string) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), stmt)
	require.Error(t, err, "%s must be refused", stmt)
	var me *drv.MySQLError
	require.True(t, errors.As(err, &me), "%s: %v", stmt, err)
	// 1142 table access denied, 1143 column access denied (the API may update only the columns a
	// task's retry resets), 1227 needs a global privilege (CREATE USER), 1044 database access denied,
	// 1045 access denied.
	require.Contains(t, []uint16{1142, 1143, 1227, 1044, 1045}, me.Number, "%s: %v", stmt, err)
}

// Each function's database user can do its function's work and nothing else: the API's user
// cannot DROP TABLE (nor delete, update events, grant, or create users); the processor's and the
// sweeper's cannot insert events or touch the counter.
func TestFunctionUsersHaveOnlyTheirPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := grantingServer(t)

	admin, err := mysql.Open(mysql.ConnConfig{DSN: dsn("admin", "admin-secret")})
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, mysql.Migrate(ctx, admin))
	users := []mysql.FunctionUser{
		{Role: mysql.RoleAPI, Name: "eo_api", Password: "api-secret"},
		{Role: mysql.RoleProcessor, Name: "eo_processor", Password: "processor-secret"},
		{Role: mysql.RoleSweeper, Name: "eo_sweeper", Password: "sweeper-secret"},
		{Role: mysql.RoleCounter, Name: "eo_counter", Password: "counter-secret"}, // users_counters_test.go
	}
	require.NoError(t, mysql.EnsureUsers(ctx, admin, users))
	require.NoError(t, mysql.EnsureUsers(ctx, admin, users), "idempotent: the migrate step runs it on every deploy")
	require.NoError(t, mysql.Migrate(ctx, admin))

	// The API's work, with both allocators: create processed and pending events, read them, count.
	var pending []int64
	for _, alloc := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		api := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{Allocator: alloc})
		created, err := api.Events.CreateProcessed(ctx, "hello")
		require.NoError(t, err, alloc)
		got, err := api.Events.Get(ctx, created.ID)
		require.NoError(t, err, alloc)
		require.Equal(t, "hello", *got.Value)
		ids, err := api.Events.CreatePendingBatch(ctx, 3)
		require.NoError(t, err, alloc)
		pending = append(pending, ids...)
		_, err = api.Events.Count(ctx)
		require.NoError(t, err, alloc)
		_, err = api.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{{
			Key: exactlyonce.KeyHash("", alloc), Value: "keyed", Answer: func(int64) (int, []byte) { return 201, []byte("{}") }}})
		require.NoError(t, err, "a keyed create, %s", alloc)
	}
	apiDB := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{}).DB.Pool()
	for _, stmt := range []string{
		"DROP TABLE events",
		"DROP TABLE status",
		"TRUNCATE TABLE events",
		"DELETE FROM events",
		"UPDATE events SET value = 'x'",
		"UPDATE events SET url = 'http://x'",
		"UPDATE events SET process_count = 2",
		"DELETE FROM task_buckets",
		"UPDATE task_attempts SET status = 1",
		"ALTER TABLE events ADD COLUMN x INT",
		"CREATE TABLE scratch (a INT)",
		"DELETE FROM status",
		"INSERT INTO status (id) VALUES (0)",
		"GRANT SELECT ON events TO 'eo_sweeper'@'%'",
		"CREATE USER 'intruder'@'%' IDENTIFIED BY 'x'",
		"SELECT * FROM schema_migrations",
		"DELETE FROM idempotency_keys",
		"UPDATE idempotency_keys SET status = 0",
		"DELETE FROM idempotency_buckets",
		"INSERT INTO idempotency_buckets (bucket, directory) VALUES (5000, '')",
	} {
		requireDenied(t, apiDB, stmt)
	}

	// The processor's and the sweeper's work: claim and settle, by id and by due date, and read states.
	processor := openAs(t, dsn("eo_processor", "processor-secret"), mysql.Config{})
	outcomes, err := processIDs(ctx, processor, false, pending[0], pending[1])
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeSettled, outcomes[pending[0]])
	outcomes, err = processIDs(ctx, processor, true, pending[2])
	require.NoError(t, err, "the lease path: lease, settle")
	require.Equal(t, exactlyonce.OutcomeSettled, outcomes[pending[2]])
	outcomes, err = processIDs(ctx, processor, false, pending[0])
	require.NoError(t, err, "a settled event: its state is read")
	require.Equal(t, exactlyonce.OutcomeAlreadySettled, outcomes[pending[0]])
	sweeper := openAs(t, dsn("eo_sweeper", "sweeper-secret"), mysql.Config{})
	settled, err := processDue(ctx, sweeper, false, 0, 100)
	require.NoError(t, err)
	require.Equal(t, len(pending)-3, settled)
	folded, err := sweeper.Events.FoldSettled(ctx, 100)
	require.NoError(t, err, "the sweeper folds settled events into the count")
	require.Positive(t, folded)
	// It packs folded events into pages (once ids are handed out past their pages), and the API
	// reads a packed event there.
	_, err = admin.ExecContext(ctx, "UPDATE status SET id = id + 3000")
	require.NoError(t, err)
	_, packedEvents, err := sweeper.Pages.PackPages(ctx, 10, time.Hour)
	require.NoError(t, err, "the sweeper packs folded events")
	require.EqualValues(t, folded, packedEvents)
	got, err := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{}).Events.Get(ctx, pending[0])
	require.NoError(t, err, "the API reads a packed event")
	require.Equal(t, exactlyonce.Processed, got.State)
	for _, stmt := range []string{"TRUNCATE TABLE event_pages", "DROP TABLE event_pages",
		"DELETE FROM pack_turn", "INSERT INTO pack_turn (turn) VALUES (1)", "DELETE FROM history_archive",
		"INSERT INTO history_archive (next_page, high_page, archived_pages, archived_events) VALUES (0, 0, 0, 0)"} {
		requireDenied(t, sweeper.DB.Pool(), stmt)
	}
	requireDenied(t, apiDB, "SELECT turn FROM pack_turn")
	tiers, err := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{}).Events.HistoryTiers(ctx)
	require.NoError(t, err, "the API (GET /history) reads how much history each tier holds")
	require.EqualValues(t, packedEvents, tiers.PagedEvents)
	// It moves pages past the window to the archive (deleting their rows, keeping its place in
	// history_archive), and the API reads an archived event there.
	_, err = admin.ExecContext(ctx, "UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	s3 := locals3.Client(t)
	bucket := archive.New(s3, locals3.Bucket(t, s3), 0)
	moved, err := sweeper.Pages.WithArchive(bucket).ArchivePages(ctx, 0, time.Minute)
	require.NoError(t, err, "the sweeper moves pages to the archive")
	require.EqualValues(t, packedEvents, moved.Events)
	got, err = openAs(t, dsn("eo_api", "api-secret"), mysql.Config{}).WithArchive(bucket).Events.Get(ctx, pending[0])
	require.NoError(t, err, "the API reads an archived event")
	require.Equal(t, exactlyonce.Processed, got.State)
	for _, stmt := range []string{"DELETE FROM event_pages", "INSERT INTO event_pages (page, events) VALUES (0, 0)",
		"UPDATE event_pages SET events = 0", "DELETE FROM task_attempts", "UPDATE history_archive SET next_page = 0"} {
		requireDenied(t, apiDB, stmt)
	}
	requireDenied(t, processor.DB.Pool(), "DELETE FROM events")

	// The sweeper is an agent: it registers (its id from the counter), pulses, persists its
	// assignment, ejects and leaves.
	agent, err := sweeper.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "s", Kind: "sweeper", Sharding: exactlyonce.ShardingDynamic}, time.Minute)
	require.NoError(t, err)
	_, err = sweeper.Agents.PulseAgent(ctx, agent.ID, time.Minute)
	require.NoError(t, err)
	_, err = sweeper.Agents.EjectExpiredAgents(ctx, agent.ID)
	require.NoError(t, err)
	_, err = sweeper.Agents.AssignAgent(ctx, agent.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	as, err := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{}).Agents.Agents(ctx)
	require.NoError(t, err, "the API lists the agents (GET /agents)")
	require.Len(t, as, 1)
	require.NoError(t, sweeper.Agents.RemoveAgent(ctx, agent.ID))

	// (The sweeper deletes the events it packs: DELETE is its, and checked above for the others.)
	for _, worker := range []*wire.Stores{processor, sweeper} {
		for _, stmt := range []string{
			"DROP TABLE events",
			"INSERT INTO events (id, value, state, created_at) VALUES (999999, NULL, 0, NOW(6))",
			"GRANT SELECT ON status TO 'eo_api'@'%'",
		} {
			requireDenied(t, worker.DB.Pool(), stmt)
		}
	}
	// The API reads the count (under a lock, which MySQL 8 grants with UPDATE); the processor has no
	// use for it.
	requireDenied(t, processor.DB.Pool(), "SELECT n FROM settled_count")
	// The sweeper prunes expired idempotency keys; the processor has no use for them.
	_, err = sweeper.Keys.PruneKeys(ctx, 10, 10)
	require.NoError(t, err)
	requireDenied(t, processor.DB.Pool(), "DELETE FROM idempotency_keys")
	// A processor that delivers tasks is an agent without a range: it registers (its id from the
	// counter), pulses and leaves, and runs event workers: creates, grows and stops them.
	self, err := processor.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "p", Kind: "processor", Sharding: exactlyonce.ShardingNone}, time.Minute)
	require.NoError(t, err)
	_, err = processor.Agents.AssignAgent(ctx, self.ID, exactlyonce.AgentRunning, nil, nil)
	require.NoError(t, err)
	_, err = processor.Agents.PulseAgent(ctx, self.ID, time.Minute)
	require.NoError(t, err)
	require.NoError(t, processor.Agents.StopWorkers(ctx, []string{"w_none"}))
	require.NoError(t, processor.Agents.RemoveAgent(ctx, self.ID))
	requireDenied(t, processor.DB.Pool(), "DELETE FROM event_workers")
	for _, stmt := range []string{"DELETE FROM agents", "INSERT INTO agents (id) VALUES (1)"} {
		requireDenied(t, apiDB, stmt)
	}
	_, err = admin.ExecContext(ctx, "SELECT 1 FROM events LIMIT 1")
	require.NoError(t, err, "the admin keeps every privilege")

	// Every table a migration creates is granted to the roles that use it, or deliberately to none.
	adminOnly := map[string]bool{"schema_migrations": true}
	granted := map[string]bool{}
	rows, err := admin.QueryContext(ctx, `SELECT DISTINCT TABLE_NAME FROM information_schema.TABLE_PRIVILEGES
		WHERE TABLE_SCHEMA = DATABASE() AND GRANTEE IN ('''eo_api''@''%''', '''eo_processor''@''%''', '''eo_sweeper''@''%''', '''eo_counter''@''%''')`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		granted[name] = true
	}
	require.NoError(t, rows.Err())
	rows, err = admin.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		require.True(t, granted[name] || adminOnly[name],
			"table %s is granted to no function's user: add its grants to users.sql and roleGrants", name)
	}
	require.NoError(t, rows.Err())
}

func TestParseFunctionUsers(t *testing.T) {
	t.Parallel()
	users, err := mysql.ParseFunctionUsers(" api:exactlyonce_api, processor:exactlyonce_processor,sweeper:exactlyonce_sweeper ")
	require.NoError(t, err)
	require.Equal(t, []mysql.FunctionUser{
		{Role: mysql.RoleAPI, Name: "exactlyonce_api", IAM: true},
		{Role: mysql.RoleProcessor, Name: "exactlyonce_processor", IAM: true},
		{Role: mysql.RoleSweeper, Name: "exactlyonce_sweeper", IAM: true},
	}, users)

	users, err = mysql.ParseFunctionUsers("")
	require.NoError(t, err)
	require.Empty(t, users)

	for spec, want := range map[string]string{
		"api":                            "not role:name",
		"admin:root":                     "unknown role",
		"api:Robert'); DROP TABLE x;":    "lower-case letters",
		"api:" + strings.Repeat("a", 33): "lower-case letters",
		"api:same,sweeper:same":          "named twice",
	} {
		_, err := mysql.ParseFunctionUsers(spec)
		require.ErrorContains(t, err, want, spec)
	}
}
