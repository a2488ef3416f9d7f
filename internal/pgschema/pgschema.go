// Package pgschema creates and drops the throwaway PostgreSQL schemas that
// tests work in, one each, so that they run in parallel and twice in a
// row: the project's own tests (internal/pgtest) and its users'
// (outboxtest).
package pgschema

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"time"

	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Schema is a schema of its own on a server.
type Schema struct {
	Name      string
	URL       string  // connection URL whose search_path is Name
	DB        *sql.DB // pool on URL
	serverURL string
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// Name returns a schema name no other test takes: prefix, then base
// lowered, with what is not [a-z0-9_] replaced and cut to 40 bytes, then 8
// random hex digits.
func Name(prefix, base string) string {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	base = unsafe.ReplaceAllString(strings.ToLower(base), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return prefix + base + "_" + hex.EncodeToString(suffix)
}

// MaxConns bounds the connections of a schema's pool: a test works on a
// few at once (a relay holds up to seven of its own), and the tests of a
// suite share their server with others.
const MaxConns = 20

// ConnectWait bounds how long a test's connection waits for room on a
// server at its max_connections (SQLSTATE 53300): the server is shared
// and its other clients let go of theirs, so it is a wait, within the
// tests' liveness bound, not a failure.
const ConnectWait = 2 * time.Minute

// Open opens a pool on url for tests: its connections wait for room on
// a full server for up to ConnectWait.
func Open(url string) (*sql.DB, error) {
	return pgdial.Open(url, pgdial.Options{MaxWait: ConnectWait})
}

// Ping tells whether the server at serverURL answers.
func Ping(ctx context.Context, serverURL string) error {
	db, err := Open(serverURL)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// Create creates schema name on the server at serverURL and opens a pool
// working in it.
func Create(ctx context.Context, serverURL, name string) (*Schema, error) {
	if err := exec(ctx, serverURL, `CREATE SCHEMA `+pgsql.QuoteIdent(name)); err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", name, err)
	}
	u := pgsql.WithSearchPath(serverURL, name)
	db, err := Open(u)
	if err != nil {
		_ = exec(ctx, serverURL, `DROP SCHEMA `+pgsql.QuoteIdent(name)+` CASCADE`)
		return nil, fmt.Errorf("opening %s: %w", u, err)
	}
	db.SetMaxOpenConns(MaxConns)
	return &Schema{Name: name, URL: u, DB: db, serverURL: serverURL}, nil
}

// Drop closes s's pool and drops the schema with everything in it.
func (s *Schema) Drop(ctx context.Context) error {
	s.DB.Close()
	if err := exec(ctx, s.serverURL, `DROP SCHEMA `+pgsql.QuoteIdent(s.Name)+` CASCADE`); err != nil {
		return fmt.Errorf("dropping schema %s: %w", s.Name, err)
	}
	return nil
}

func exec(ctx context.Context, serverURL, query string) error {
	db, err := Open(serverURL)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, query)
	return err
}
