package config

import (
	"net"
	"strconv"
	"strings"

	drv "github.com/go-sql-driver/mysql"
)

// LocalGetenv is how the development commands read getenv (the local runner, `make run`; the
// standalone agent's -local, `make agent`; cmd/invoke, `make invoke`): as it is, except that when
// neither DB_DSN nor DB_HOST is set, DB_DSN reads as `make run`'s database (LocalDSN) with
// DB_NAME, DB_USER, DB_PASSWORD and DB_PORT put in where they are set, and those then read as
// unset. So DB_NAME=newcomer is the database newcomer on `make run`'s server for each of them
// alike; beside DB_DSN or DB_HOST they are Load's to judge.
func LocalGetenv(getenv func(string) string) func(string) string {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if get("DB_DSN") != "" || get("DB_HOST") != "" {
		return getenv
	}
	cfg, err := drv.ParseDSN(LocalDSN)
	if err != nil {
		panic(err) // a constant
	}
	folded := map[string]bool{}
	if v := get("DB_NAME"); v != "" {
		cfg.DBName, folded["DB_NAME"] = v, true
	}
	if v := get("DB_USER"); v != "" {
		cfg.User, folded["DB_USER"] = v, true
	}
	if v := get("DB_PASSWORD"); v != "" {
		cfg.Passwd, folded["DB_PASSWORD"] = v, true
	}
	if v := get("DB_PORT"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 65535 { // else Load says what is wrong
			host, _, _ := net.SplitHostPort(cfg.Addr)
			cfg.Addr, folded["DB_PORT"] = net.JoinHostPort(host, v), true
		}
	}
	dsn := cfg.FormatDSN()
	return func(k string) string {
		if k == "DB_DSN" {
			return dsn
		}
		if folded[k] {
			return ""
		}
		return getenv(k)
	}
}

// LocalWebhookSecret is the development signing secret of local runs: `make run` (scripts/run.sh)
// and `make agent` (bin/agent -local) sign tasks with it when neither WEBHOOK_SECRET nor
// WEBHOOK_SECRET_ARN is set, so that the agents of one local system deliver alike. Never in a
// deployment: it is in this repository.
const LocalWebhookSecret = "whsec_ZXhhY3RseW9uY2UtbG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0"
