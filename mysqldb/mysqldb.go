// Package mysqldb opens MySQL 8 and MariaDB 10.6+ databases the way the
// outbox needs them: github.com/go-sql-driver/mysql, times read as
// time.Time in UTC, the session's clock in UTC (so that the database's
// UTC_TIMESTAMP and the columns ent writes agree).
//
//	db, err := mysqldb.Open("mysql://root@127.0.0.1:3306/app")
//	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.MySQL, db)))
package mysqldb

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// IsURL tells whether u names a MySQL or MariaDB database:
// mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE or mariadb://….
func IsURL(u string) bool {
	return strings.HasPrefix(u, "mysql://") || strings.HasPrefix(u, "mariadb://")
}

// Config is the driver's configuration of the database u names (see
// IsURL), with the settings the outbox rests on; the URL's query
// parameters are the driver's own (tls=true, timeout=5s, …).
func Config(u string) (*mysql.Config, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("mysqldb: %w", err)
	}
	if parsed.Scheme != "mysql" && parsed.Scheme != "mariadb" {
		return nil, fmt.Errorf("mysqldb: %q is not a mysql:// or mariadb:// URL", parsed.Redacted())
	}
	addr := parsed.Host
	if parsed.Port() == "" {
		addr = parsed.Hostname() + ":3306"
	}
	db := strings.TrimPrefix(parsed.Path, "/")
	if db == "" {
		return nil, fmt.Errorf("mysqldb: %q names no database (mysql://user@host:3306/DATABASE)", parsed.Redacted())
	}
	// The URL's parameters are read by the driver's own DSN parser; the
	// rest of the URL is set on what it returns.
	cfg, err := mysql.ParseDSN("/?" + parsed.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("mysqldb: the parameters of %q: %w", parsed.Redacted(), err)
	}
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", addr, db
	cfg.User = parsed.User.Username()
	cfg.Passwd, _ = parsed.User.Password()
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	return cfg, nil
}

// DSN is the driver's data source name of the database u names.
func DSN(u string) (string, error) {
	cfg, err := Config(u)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

// Open opens the database u names (see IsURL).
func Open(u string) (*sql.DB, error) {
	cfg, err := Config(u)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysqldb: %w", err)
	}
	return sql.OpenDB(conn), nil
}

// WithDatabase is the URL u (see IsURL) naming database name instead of
// its own: a program that makes a database of its own on the server u
// names opens it at this URL.
func WithDatabase(u, name string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("mysqldb: %w", err)
	}
	parsed.Path = "/" + name
	return parsed.String(), nil
}
