package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/mysqldb"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// testDatabase is the database a Harness made for its test: two pools on
// it, the test's (DB) and the harness's own (db), and how to drop it.
type testDatabase struct {
	DB, db     *sql.DB
	name, url  string
	entDialect string // ent's name of the database, for Driver
	drop       func(context.Context) error
	dialect    outboxdb.Dialect
}

// openDatabase makes t's database: a SQLite file with OnSQLite, else on
// the server at the URL WithDatabaseURL gives, DATABASE_URL, or
// DefaultURL, by its scheme.
func openDatabase(t testing.TB, onSQLite bool, serverURL string) testDatabase {
	t.Helper()
	if onSQLite {
		return openSQLite(t)
	}
	if serverURL == "" {
		serverURL = os.Getenv("DATABASE_URL")
	}
	if serverURL == "" {
		serverURL = DefaultURL
	}
	switch {
	case mysqldb.IsURL(serverURL):
		return openMySQL(t, serverURL)
	case sqlitedb.IsURL(serverURL):
		t.Fatalf("outboxtest: %s is a SQLite URL; the harness makes a SQLite file of the test's own with "+
			"outboxtest.New(t, outboxtest.OnSQLite())", serverURL)
	}
	return openPostgres(t, serverURL)
}

// unreachable skips t because the server at serverURL did not answer, or
// fails it under CI=true.
func unreachable(t testing.TB, server, serverURL string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("outboxtest: %s at %s is not reachable (%v); under CI=true that fails the test",
			server, broker.Redacted(serverURL), err)
	}
	t.Skipf("outboxtest: skipping: %s at %s is not reachable (%v); set DATABASE_URL to a server's URL, "+
		"or CI=true to fail instead", server, broker.Redacted(serverURL), err)
}

// openPostgres creates a schema of t's own on the server.
func openPostgres(t testing.TB, serverURL string) testDatabase {
	t.Helper()
	// A server at its max_connections is waited for (pgschema.ConnectWait);
	// one that is not there answers at once.
	ctx, cancel := context.WithTimeout(context.Background(), pgschema.ConnectWait+10*time.Second)
	defer cancel()
	if err := pgschema.Ping(ctx, serverURL); err != nil {
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
			// The server is there and refused: no database of that name,
			// a password it does not take. A skip would hide that the
			// test never ran.
			t.Fatalf("outboxtest: PostgreSQL at %s answered: %v; set DATABASE_URL to a database that exists, "+
				"e.g. the server's postgres database: postgres://USER@HOST:5432/postgres", broker.Redacted(serverURL), err)
		}
		unreachable(t, "PostgreSQL", serverURL, err)
	}
	s, err := pgschema.Create(ctx, serverURL, pgschema.Name("outboxtest_", t.Name()))
	if err != nil {
		t.Fatalf("outboxtest: %v on %s", err, broker.Redacted(serverURL))
	}
	db, err := pgschema.Open(s.URL)
	if err != nil {
		_ = s.Drop(ctx)
		t.Fatalf("outboxtest: opening %s: %v", broker.Redacted(s.URL), err)
	}
	return testDatabase{DB: s.DB, db: db, name: s.Name, url: s.URL, entDialect: dialect.Postgres,
		drop: s.Drop, dialect: outboxdb.Postgres}
}

// openMySQL creates a database of t's own on the MySQL or MariaDB server,
// collated as package mysqldb asks.
func openMySQL(t testing.TB, serverURL string) testDatabase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := mysqldb.Open(serverURL)
	if err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		if myErr := (*mysql.MySQLError)(nil); errors.As(err, &myErr) {
			t.Fatalf("outboxtest: MySQL at %s answered: %v; set the URL to a database that exists and that "+
				"the user may create databases beside", broker.Redacted(serverURL), err)
		}
		unreachable(t, "MySQL", serverURL, err)
	}
	name := pgschema.Name("outboxtest_", t.Name())
	quoted := "`" + name + "`" // Name leaves letters, digits and _
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+quoted+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = admin.Close()
		t.Fatalf("outboxtest: creating database %s on %s: %v", name, broker.Redacted(serverURL), err)
	}
	drop := func(ctx context.Context) error {
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoted); err != nil {
			return errors.New("dropping database " + name + ": " + err.Error())
		}
		return nil
	}
	url, err := mysqldb.WithDatabase(serverURL, name)
	var pools [2]*sql.DB
	for i := 0; err == nil && i < len(pools); i++ {
		pools[i], err = mysqldb.Open(url)
	}
	if err != nil {
		_ = drop(ctx)
		t.Fatalf("outboxtest: opening database %s: %v", name, err)
	}
	for _, p := range pools {
		p.SetMaxOpenConns(pgschema.MaxConns)
	}
	return testDatabase{DB: pools[0], db: pools[1], name: name, url: url, entDialect: dialect.MySQL,
		drop: func(ctx context.Context) error { pools[0].Close(); return drop(ctx) }, dialect: outboxdb.MySQL}
}

// openSQLite opens a SQLite file of t's own, in t.TempDir(), removed when
// t ends.
func openSQLite(t testing.TB) testDatabase {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	var pools [2]*sql.DB
	var err error
	for i := 0; err == nil && i < len(pools); i++ {
		pools[i], err = sqlitedb.Open(url)
	}
	if err != nil {
		t.Fatalf("outboxtest: opening SQLite: %v", err)
	}
	return testDatabase{DB: pools[0], db: pools[1], url: url, entDialect: dialect.SQLite,
		drop: func(context.Context) error { return pools[0].Close() }, dialect: outboxdb.SQLite}
}
