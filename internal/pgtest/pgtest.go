// Package pgtest gives each test its own PostgreSQL schema on the local
// server, so tests run in parallel and twice in a row without interfering.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect/sql/schema"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// DefaultURL is the local server the tests use when DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DB is a schema of its own on the test server.
type DB struct {
	Schema string
	URL    string  // connection URL whose search_path is Schema
	DB     *sql.DB // pool on URL

	dropper *pgschema.Schema // Open's, for Drop
}

// OpenDB opens a pool on url whose connections wait for room on a full
// server (too many clients, SQLSTATE 53300) within the tests' liveness
// bound, as every pool of the tests should: the server is shared.
func OpenDB(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, err := pgschema.Open(url)
	if err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
	return db
}

// ServerURL is the test server's URL.
func ServerURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Unavailable skips t, or fails it under CI=true, because a service the test
// needs is not reachable.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true but is not reachable: %v", service, err)
	}
	t.Skipf("skipping: %s is not reachable (%v); start it with ../shared/services.sh, or set CI=true to fail instead", service, err)
}

// New creates a fresh schema for t and drops it when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	// A full server is waited for (pgschema.ConnectWait); one that is not
	// there answers at once.
	ctx, cancel := context.WithTimeout(context.Background(), pgschema.ConnectWait+10*time.Second)
	defer cancel()
	if err := pgschema.Ping(ctx, ServerURL()); err != nil {
		Unavailable(t, "PostgreSQL at "+ServerURL(), err)
	}
	s, err := pgschema.Create(ctx, ServerURL(), pgschema.Name("t_", t.Name()))
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Logf("%v", err)
		}
	})
	return &DB{Schema: s.Name, URL: s.URL, DB: s.DB}
}

// WithSearchPath returns databaseURL with its search_path set to schema.
func WithSearchPath(databaseURL, schema string) string {
	return pgsql.WithSearchPath(databaseURL, schema)
}

// migrateMu runs the ent migrations of one test binary one at a time:
// ent's migration writes package state (its tables' descriptions), and
// two at once crash the binary with a concurrent map write.
var migrateMu sync.Mutex

// Migrate runs an ent client's Schema.Create (pass the method itself) and
// fails t on an error.
func Migrate(t testing.TB, create func(context.Context, ...schema.MigrateOption) error) {
	t.Helper()
	migrateMu.Lock()
	defer migrateMu.Unlock()
	if err := create(context.Background()); err != nil {
		t.Fatalf("ent migration: %v", err)
	}
}

// RequireLogical skips t, or fails it under CI=true, unless the server
// runs with wal_level=logical, which the WAL path and its slots need.
func RequireLogical(t testing.TB, db *sql.DB) {
	t.Helper()
	var level string
	if err := db.QueryRow(`SHOW wal_level`).Scan(&level); err != nil {
		t.Fatalf("reading wal_level: %v", err)
	}
	if level != "logical" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the WAL path's tests need wal_level=logical under CI=true, not %q", level)
		}
		t.Skipf("skipping: the WAL path needs wal_level=logical, not %q; ../shared/services.sh sets it", level)
	}
}

// DropWAL drops slot once no session streams it (for up to three minutes,
// as a relay being stopped lets go of it), and publication.
func DropWAL(t testing.TB, db *sql.DB, slot, publication string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		_, err := db.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Logf("dropping slot %s: %v", slot, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := db.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+pgsql.QuoteIdent(publication)); err != nil {
		t.Logf("dropping publication %s: %v", publication, err)
	}
}

// OtherDatabase is a new database of its own on the test server, dropped
// at the end of the test: one the notifications of the test's database do
// not reach (they are per database), as a LISTEN connection to the wrong
// place would be.
func OtherDatabase(t testing.TB) *sql.DB {
	t.Helper()
	admin := OpenDB(t, ServerURL())
	t.Cleanup(func() { admin.Close() }) // last: after the drop below
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "entoutbox_other_" + hex.EncodeToString(suffix)
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatalf("creating a database of the test's own: %v", err)
	}
	u, err := url.Parse(ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db := OpenDB(t, u.String())
	t.Cleanup(func() {
		db.Close()
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	return db
}
