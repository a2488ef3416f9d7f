package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// otherDatabase is where one of the held transactions runs: a transaction
// in another database of the same server still holds back the snapshot
// xmin that the compatible path waits for.
const otherDatabase = "entoutbox_bench_other"

// env is what every row shares: the server, the relay binary, the broker.
type env struct {
	cfg           config
	admin         *sql.DB // on cfg.DatabaseURL, for schemas
	serverVersion string
	bin           string // the entoutbox command
	binDir        string
	otherURL      string // URL of otherDatabase; empty when it could not be made
	otherErr      error  // why otherURL is empty
}

// newEnv checks that PostgreSQL and the broker answer, builds the relay
// command (unless cfg.Bin names one) and makes sure the other database
// exists.
func newEnv(ctx context.Context, cfg config) (_ *env, err error) {
	e := &env{cfg: cfg}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.admin, err = sql.Open("pgx", cfg.DatabaseURL); err != nil {
		return nil, fmt.Errorf("opening PostgreSQL at %s: %w", broker.Redacted(cfg.DatabaseURL), err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.admin.QueryRowContext(pctx, "SHOW server_version").Scan(&e.serverVersion); err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s is not reachable: %w", broker.Redacted(cfg.DatabaseURL), err)
	}
	b, err := broker.Open(pctx, cfg.Broker, broker.Options{})
	if err != nil {
		return nil, fmt.Errorf("the broker is not reachable: %w", err)
	}
	_ = b.Close()

	// Only the relay rows, the consumer section's publishing, the SQLite
	// and MariaDB sections and the fleet section run it.
	if e.bin = cfg.Bin; e.bin == "" && (len(cfg.Paths) > 0 || cfg.ConsumerEvents > 0 || cfg.SQLite || cfg.MySQL || cfg.FleetDatabases > 0 || cfg.Retention) {
		e.progress("building the entoutbox command")
		if e.binDir, err = os.MkdirTemp("", "entoutbox-bench"); err != nil {
			return nil, fmt.Errorf("making a directory for the relay binary: %w", err)
		}
		e.bin = filepath.Join(e.binDir, "entoutbox")
		if err := buildCommand(ctx, e.bin); err != nil {
			return nil, err
		}
	}

	if err := ensureDatabase(ctx, e.admin, otherDatabase); err != nil {
		e.otherErr = err
	} else {
		e.otherURL = withDatabase(cfg.DatabaseURL, otherDatabase)
	}
	return e, nil
}

func (e *env) close() {
	if e.admin != nil {
		e.admin.Close()
	}
	if e.binDir != "" {
		os.RemoveAll(e.binDir)
	}
}

func (e *env) progress(format string, args ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, "bench: "+format+"\n", args...)
	}
}

// buildCommand builds cmd/entoutbox into bin. By import path rather than
// ./cmd/entoutbox, so that it works from any directory of the module (the
// test runs in bench/).
func buildCommand(ctx context.Context, bin string) error {
	build := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "github.com/entoutbox/entoutbox/cmd/entoutbox")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the entoutbox command: %w\n%s", err, out)
	}
	return nil
}

// goTool is the go command that runs this program, or the one on PATH.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// ensureDatabase creates database name unless it exists. Two benches
// creating it at once is not an error.
func ensureDatabase(ctx context.Context, admin *sql.DB, name string) error {
	var exists bool
	if err := admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("looking for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err := admin.ExecContext(ctx, `CREATE DATABASE `+pgsql.QuoteIdent(name))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns databaseURL pointing at database db instead.
func withDatabase(databaseURL, db string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		return databaseURL + " dbname=" + db
	}
	u.Path = "/" + db
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}
