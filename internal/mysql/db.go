package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/go-sql-driver/mysql"
)

// ConnConfig says how to reach the database.
type ConnConfig struct {
	// DSN is a go-sql-driver/mysql DSN. When set, Host, Port, Name, User and Password are ignored.
	DSN string
	// Host, Port, Name, User and Password build the DSN when DSN is empty (in AWS: the RDS Proxy).
	Host     string
	Port     int // default 3306
	Name     string
	User     string
	Password string
	// IAMAuth authenticates with an IAM token built for every new connection (tokens last 15
	// minutes; a connection outlives its token, which is only checked at connect). Forces TLS.
	IAMAuth bool
	// Region and Credentials sign IAM tokens.
	Region      string
	Credentials aws.CredentialsProvider
	// TLS turns on TLS with the system's trust store.
	TLS bool
	// MaxOpenConns caps the pool. Default 4: a Lambda execution environment handles one request at
	// a time, and the database's connection budget is shared by every environment.
	MaxOpenConns int
}

// driverConfig turns the ConnConfig into the driver's Config, with the settings the system relies
// on forced whatever the DSN says.
func (c ConnConfig) driverConfig() (*mysql.Config, error) {
	var cfg *mysql.Config
	if c.DSN != "" {
		parsed, err := mysql.ParseDSN(c.DSN)
		if err != nil {
			return nil, fmt.Errorf("parse DB_DSN: %w", err)
		}
		cfg = parsed
	} else {
		if c.Host == "" || c.User == "" {
			return nil, fmt.Errorf("database: set DB_DSN, or DB_HOST and DB_USER")
		}
		cfg = mysql.NewConfig()
		cfg.Net = "tcp"
		cfg.Addr = net.JoinHostPort(c.Host, strconv.Itoa(cmp.Or(c.Port, 3306)))
		cfg.DBName = cmp.Or(c.Name, "events")
		cfg.User = c.User
		cfg.Passwd = c.Password
	}
	// No server-side prepared statements: RDS Proxy pins a session that prepares one, losing the
	// pooling. Arguments are escaped by the driver instead.
	cfg.InterpolateParams = true
	cfg.ParseTime = true
	// Timestamps are written by the database (NOW(6), in the session's time zone) and read back as
	// UTC (Loc), so every session is pinned to UTC, whatever the server's default zone. The driver
	// sends the DSN's system variables as one SET on each new connection; RDS Proxy tracks
	// time_zone, so that SET does not pin the session to one database connection.
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if c.TLS || c.IAMAuth {
		cfg.TLSConfig = "true"
	}
	if c.IAMAuth {
		if c.Credentials == nil || c.Region == "" {
			return nil, fmt.Errorf("database: IAM auth needs AWS credentials and a region")
		}
		cfg.AllowCleartextPasswords = true // the token travels as a cleartext password, inside TLS
		endpoint, user, region, creds := cfg.Addr, cfg.User, c.Region, c.Credentials
		if err := cfg.Apply(mysql.BeforeConnect(func(ctx context.Context, dc *mysql.Config) error {
			token, err := auth.BuildAuthToken(ctx, endpoint, region, user, creds)
			if err != nil {
				return fmt.Errorf("build IAM auth token: %w", err)
			}
			dc.Passwd = token
			return nil
		})); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// Open returns a pool for the configuration. It does not connect; the first statement does. Every
// connection's session runs at READ COMMITTED (readCommitted); a DB (New) needs a pool from Open or
// OpenConnector.
func Open(c ConnConfig) (*sql.DB, error) {
	connector, err := Connector(c)
	if err != nil {
		return nil, err
	}
	return OpenConnector(connector, c), nil
}

// Connector returns the driver's connector for the configuration, with the settings the system
// relies on forced (for a caller that wraps it: the benchmark counts the statements agents send).
func Connector(c ConnConfig) (driver.Connector, error) {
	cfg, err := c.driverConfig()
	if err != nil {
		return nil, err
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return readCommitted{inner}, nil
}

// readCommitted opens the driver's connections with their session at READ COMMITTED, the level
// every transaction of the store runs at (tx.go): set once per connection here, it spares every
// transaction the SET TRANSACTION ISOLATION LEVEL round trip that database/sql's BeginTx would send
// before its START TRANSACTION. It sets the variable RDS Proxy lists as tracked (so the session is
// not pinned): transaction_isolation (MySQL 8, Aurora MySQL 3, MariaDB from 11.1), or, where the
// server does not know that name (MariaDB 10.11: error 1193), its older name tx_isolation.
type readCommitted struct{ driver.Connector }

func (c readCommitted) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	exec := conn.(driver.ExecerContext)
	_, err = exec.ExecContext(ctx, "SET SESSION transaction_isolation = 'READ-COMMITTED'", nil)
	if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == errUnknownSystemVariable {
		_, err = exec.ExecContext(ctx, "SET SESSION tx_isolation = 'READ-COMMITTED'", nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("set the session's isolation level: %w", err)
	}
	return conn, nil
}

// errUnknownSystemVariable is ER_UNKNOWN_SYSTEM_VARIABLE.
const errUnknownSystemVariable = 1193

// OpenConnector returns a pool on connector, sized and aged as Open's.
func OpenConnector(connector driver.Connector, c ConnConfig) *sql.DB {
	db := sql.OpenDB(connector)
	n := cmp.Or(c.MaxOpenConns, 4)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	// Below RDS Proxy's and MySQL's idle timeouts, so a pooled connection is not found dead.
	db.SetConnMaxIdleTime(4 * time.Minute)
	db.SetConnMaxLifetime(30 * time.Minute)
	return db
}
