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

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

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

// Ping tells whether the server at serverURL answers.
func Ping(ctx context.Context, serverURL string) error {
	db, err := sql.Open("pgx", serverURL)
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
	db, err := sql.Open("pgx", u)
	if err != nil {
		_ = exec(ctx, serverURL, `DROP SCHEMA `+pgsql.QuoteIdent(name)+` CASCADE`)
		return nil, fmt.Errorf("opening %s: %w", u, err)
	}
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
	db, err := sql.Open("pgx", serverURL)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, query)
	return err
}
