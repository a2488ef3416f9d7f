package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/mysqldb"
)

// The MariaDB section (see pollpath.go): a database of the bench's own per
// measure on the server at --mysql-url, opened with package mysqldb and
// dropped at the end. On MySQL its lines say MySQL.

const defaultMySQLURL = "mysql://root@127.0.0.1:3306/test"

// measureMySQL runs the section and returns its text, and the server's
// name and version for the env line ("" when it could not be reached).
func measureMySQL(ctx context.Context, e *env) (text, server string) {
	srv, err := openMySQLServer(ctx, e.cfg.MySQLURL, e.progress)
	if err != nil {
		return sectionText("MariaDB", nil, err), ""
	}
	defer srv.close()
	sec := pollSection{name: srv.name, topic: "mysql", open: srv.newDatabase, retainedRows: mysqlRetainedRows, shared: true}
	lines, err := measurePoll(ctx, e, sec)
	return sectionText(srv.name, lines, err), srv.name + " " + srv.version
}

// mysqlServer is the server the section makes its databases on.
type mysqlServer struct {
	url           string  // the server's, naming a database that exists
	admin         *sql.DB // on url: creates and drops the bench's databases
	name, version string  // "MariaDB" or "MySQL", and its version
	warn          func(format string, args ...any)
}

// openMySQLServer connects to the server at url and asks its version.
func openMySQLServer(ctx context.Context, url string, warn func(string, ...any)) (*mysqlServer, error) {
	admin, err := mysqldb.Open(url)
	if err != nil {
		return nil, err
	}
	s := &mysqlServer{url: url, admin: admin, name: "MariaDB", warn: warn}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admin.QueryRowContext(pctx, "SELECT VERSION()").Scan(&s.version); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("MariaDB/MySQL at %s is not reachable: %w", broker.Redacted(url), err)
	}
	if !strings.Contains(s.version, "MariaDB") {
		s.name = "MySQL"
	}
	s.version, _, _ = strings.Cut(s.version, "-") // 10.11.6-MariaDB-…
	return s, nil
}

func (s *mysqlServer) close() { _ = s.admin.Close() }

// newDatabase creates a database of the bench's own, opens it as the
// outbox's documentation says and migrates it; closing it drops it.
func (s *mysqlServer) newDatabase(ctx context.Context) (*pollDB, error) {
	name := "entoutbox_bench_" + randomHex()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, fmt.Errorf("creating database %s: %w", name, err)
	}
	d := &pollDB{url: withDatabase(s.url, name), remove: func() { s.drop(name) }}
	var err error
	if d.db, err = mysqldb.Open(d.url); err != nil {
		d.remove()
		return nil, err
	}
	if err := d.migrate(ctx, dialect.MySQL, "database "+name); err != nil {
		return nil, err
	}
	// The index the relay makes when it starts (outboxdb's
	// EnsurePendingIndex): the emit cost is measured with it, as an
	// outbox a relay ran on has it.
	tables := outboxdb.New("", "")
	tables.Dialect = outboxdb.MySQL
	if _, err := tables.EnsurePendingIndex(ctx, d.db); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// drop drops database name, without the run's context: even after the
// run was interrupted.
func (s *mysqlServer) drop(name string) {
	if _, err := s.admin.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
		s.warn("dropping database %s: %v", name, err)
	}
}

// mysqlRetainedRows writes ? delivered rows (up to a million), as a relay
// leaves them. The numbers come from a cross join of digits: a recursive
// CTE stops at 1,000 rows by default (max_recursive_iterations,
// cte_max_recursion_depth).
var mysqlRetainedRows = func() string {
	const digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4" +
		" UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	from, sum := make([]string, 6), make([]string, 6)
	for k, place := 0, 1; k < len(from); k, place = k+1, place*10 {
		from[k] = fmt.Sprintf("%s d%d", digits, k)
		sum[k] = fmt.Sprintf("d%d.d * %d", k, place)
	}
	return `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
	SELECT CONCAT('00000000-0000-7000-8000-', LPAD(i, 12, '0')), 'profile.updated', 1, 'profiles', 'Profile', i % 1000, '{}',
		UTC_TIMESTAMP(6) FROM (SELECT 1 + ` + strings.Join(sum, " + ") + ` AS i FROM ` + strings.Join(from, ", ") + `) n WHERE i <= ?`
}()
