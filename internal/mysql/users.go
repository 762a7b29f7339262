package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Role is what a function does with the database. Each function connects as a database user of
// its own with the privileges of its role and no other (users.sql); only the migrate step
// connects as the admin user, and it creates the others (EnsureUsers).
type Role string

const (
	// RoleAPI inserts and reads events and advances the id counter.
	RoleAPI Role = "api"
	// RoleProcessor and RoleSweeper read and update events.
	RoleProcessor Role = "processor"
	RoleSweeper   Role = "sweeper"
	// RoleCounter applies counter messages: the counter service's consumer (counterstore/counters.sql).
	RoleCounter Role = "counter"
)

// roleGrants are each role's GRANT statements of users.sql, each on one named table. A table added
// by a migration adds the grants of the roles that use it here.
var roleGrants = map[Role][]*string{
	RoleAPI: {&queries.GrantReadInsertEvents, &queries.GrantAdvanceCounter, &queries.GrantReadSettledCount,
		&queries.GrantReadCounterSums, &queries.GrantKeyBuckets, &queries.GrantReadInsertKeys, &queries.GrantReadAgents,
		&queries.GrantTaskBuckets, &queries.GrantReadAttempts, &queries.GrantRetryTasks, &queries.GrantReadEventWorkers,
		&queries.GrantReadPages, &queries.GrantReadArchiveCursor, &queries.GrantReferenceDirectory,
		&queries.GrantLogReferenceDirectory, &queries.GrantReadReferenceBackfill},
	// A processor that delivers tasks registers as an agent without a range (agents.Rangeless), its
	// id from the counter, and runs event workers of its own.
	RoleProcessor: {&queries.GrantClaimSettleEvents, &queries.GrantAdvanceCounter, &queries.GrantAgents,
		&queries.GrantTaskBuckets, &queries.GrantRecordAttempts, &queries.GrantRunEventWorkers},
	// A sweeper registers as an agent, whose id it takes from the counter (RegisterAgent).
	RoleSweeper: {&queries.GrantClaimSettleEvents, &queries.GrantAgents, &queries.GrantAdvanceCounter,
		&queries.GrantFoldSettledCount, &queries.GrantPruneKeys, &queries.GrantReadCounterSums,
		&queries.GrantSweepCounterFacts, &queries.GrantSweepCounterNotifications, &queries.GrantTaskBuckets,
		&queries.GrantRecordAttempts, &queries.GrantEventWorkers, &queries.GrantPackPages, &queries.GrantPackTurn,
		&queries.GrantDeletePackedEvents, &queries.GrantPackAttempts, &queries.GrantArchivePages, &queries.GrantArchiveCursor,
		&queries.GrantReferenceDirectory, &queries.GrantCompactReferenceDirectory, &queries.GrantReferenceBackfill},
	RoleCounter: {&queries.GrantLockCounterBuckets, &queries.GrantWriteCounterDirectories,
		&queries.GrantWriteCounterSums, &queries.GrantInsertCounterFacts, &queries.GrantRecordCounterNotifications},
}

// FunctionUser is the database user of one function.
type FunctionUser struct {
	Role Role
	// Name is the user's name; the account is 'Name'@'%'.
	Name string
	// IAM: the user signs in with IAM tokens (Aurora MySQL's AWSAuthenticationPlugin; through RDS
	// Proxy with end-to-end IAM auth). Otherwise it signs in with Password (MariaDB, or MySQL
	// without IAM: local runs and tests).
	IAM      bool
	Password string
}

// userName is what a user name may be: what MySQL 8 accepts unquoted-safe, at most 32 characters.
//
// Compiled on first use (the migrate function's, when it reads DB_FUNCTION_USERS), not at every
// function's initialisation.
var userName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_]{0,31}$`) })

func (u FunctionUser) validate() error {
	if _, ok := roleGrants[u.Role]; !ok {
		return fmt.Errorf("database user %q: unknown role %q (want %s, %s or %s)", u.Name, u.Role, RoleAPI, RoleProcessor, RoleSweeper)
	}
	if !userName().MatchString(u.Name) {
		return fmt.Errorf("database user %q (role %s): a name is 1-32 lower-case letters, digits and _, not starting with a digit", u.Name, u.Role)
	}
	if !u.IAM && u.Password == "" {
		return fmt.Errorf("database user %q (role %s): a user without IAM auth needs a password", u.Name, u.Role)
	}
	return nil
}

// account is the user's account, quoted for a statement: the name is validated, so quoting is
// enough.
func (u FunctionUser) account() string { return "'" + u.Name + "'@'%'" }

// ParseFunctionUsers reads the migrate step's DB_FUNCTION_USERS: comma-separated role:name pairs,
// such as "api:exactlyonce_api,processor:exactlyonce_processor,sweeper:exactlyonce_sweeper". These
// users sign in with IAM (a password never travels in the environment). Empty: no users.
func ParseFunctionUsers(spec string) ([]FunctionUser, error) {
	var out []FunctionUser
	seen := map[string]bool{}
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		role, name, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("DB_FUNCTION_USERS: %q is not role:name", pair)
		}
		u := FunctionUser{Role: Role(strings.TrimSpace(role)), Name: strings.TrimSpace(name), IAM: true}
		if err := u.validate(); err != nil {
			return nil, fmt.Errorf("DB_FUNCTION_USERS: %w", err)
		}
		if seen[u.Name] {
			return nil, fmt.Errorf("DB_FUNCTION_USERS: user %q named twice: each function has its own", u.Name)
		}
		seen[u.Name] = true
		out = append(out, u)
	}
	return out, nil
}

// EnsureUsers creates each user that does not exist yet and grants it its role's privileges on the
// tables of db's database. It is idempotent (CREATE USER IF NOT EXISTS; GRANT of a privilege held
// is a no-op), so the migrate step runs it on every deploy, after Migrate. It needs a user that may
// create users and grant (the cluster's admin user).
func EnsureUsers(ctx context.Context, db *sql.DB, users []FunctionUser) error {
	for _, u := range users {
		if err := u.validate(); err != nil {
			return err
		}
	}
	for _, u := range users {
		if err := ensureUser(ctx, db, u); err != nil {
			return fmt.Errorf("database user %s (role %s): %w", u.Name, u.Role, err)
		}
	}
	return nil
}

func ensureUser(ctx context.Context, db *sql.DB, u FunctionUser) error {
	stmt := func(q string) string { return strings.ReplaceAll(q, "/*user*/", u.account()) }
	if u.IAM {
		if _, err := db.ExecContext(ctx, stmt(queries.CreateUserIAM)); err != nil {
			return fmt.Errorf("create: %w", err)
		}
	} else {
		for _, q := range []string{queries.CreateUserPassword, queries.AlterUserPassword} {
			if _, err := db.ExecContext(ctx, stmt(q), u.Password); err != nil {
				return fmt.Errorf("create: %w", err)
			}
		}
	}
	for _, grant := range roleGrants[u.Role] {
		if _, err := db.ExecContext(ctx, stmt(*grant)); err != nil {
			return fmt.Errorf("grant (%s): %w", queryName(&queries, grant), err)
		}
	}
	return nil
}
