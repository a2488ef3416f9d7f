package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// fleetDBs is the tenants of the fleet section: one real PostgreSQL
// database each, copied from a template migrated once, all named after
// the run and dropped at its end.
type fleetDBs struct {
	admin     *sql.DB
	serverURL string
	prefix    string   // bench_fleet_<hex>: every database of the run starts with it
	tenants   []string // tenant i's name; its database is prefix_<name>
	file      string   // the databases file listing them
	dir       string   // the file's directory
	created   time.Duration
	progress  func(format string, args ...any)
}

// newFleetDBs makes n tenant databases and the databases file naming
// them. What it made is dropped again when it fails.
func newFleetDBs(ctx context.Context, e *env, n int) (_ *fleetDBs, err error) {
	f := &fleetDBs{admin: e.admin, serverURL: e.cfg.DatabaseURL, prefix: "bench_fleet_" + randomHex(), progress: e.progress}
	defer func() {
		if err != nil {
			f.drop()
		}
	}()
	start := time.Now()
	template := f.prefix + "_template"
	if err := f.createTemplate(ctx, template); err != nil {
		return nil, err
	}
	for i := range n {
		name := fmt.Sprintf("t%03d", i)
		if err := f.copyTemplate(ctx, template, f.database(name)); err != nil {
			return nil, err
		}
		f.tenants = append(f.tenants, name)
		if (i+1)%50 == 0 {
			e.progress("%d of %d databases made", i+1, n)
		}
	}
	f.created = time.Since(start)
	if f.dir, err = os.MkdirTemp("", "entoutbox-bench-fleet"); err != nil {
		return nil, fmt.Errorf("making a directory for the databases file: %w", err)
	}
	f.file = filepath.Join(f.dir, "databases.json")
	return f, f.writeFile()
}

// database is the name of tenant's database.
func (f *fleetDBs) database(tenant string) string { return f.prefix + "_" + tenant }

// url is the URL of database db on the bench's server, with no
// application_name: each relay process names its connections by
// PGAPPNAME, so that they can be counted per process.
func (f *fleetDBs) url(db string) string {
	u := withDatabase(f.serverURL, db)
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return u
	}
	q := p.Query()
	q.Del("application_name")
	p.RawQuery = q.Encode()
	return p.String()
}

// createTemplate makes database name and migrates the test ent schema
// into it, as newSandbox does for a schema.
func (f *fleetDBs) createTemplate(ctx context.Context, name string) error {
	if _, err := f.admin.ExecContext(ctx, `CREATE DATABASE `+pgsql.QuoteIdent(name)); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	db, err := sql.Open("pgx", withApplicationName(f.url(name), benchApplicationName))
	if err != nil {
		return fmt.Errorf("opening database %s: %w", name, err)
	}
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	defer client.Close() // closes db: a template is copied only once nobody is connected
	if err := client.Schema.Create(ctx); err != nil {
		return fmt.Errorf("migrating database %s: %w", name, err)
	}
	return nil
}

// copyTemplate makes database name from template. The template's last
// session may still be ending on the server: a copy refused for that is
// tried again.
func (f *fleetDBs) copyTemplate(ctx context.Context, template, name string) error {
	for attempt := 0; ; attempt++ {
		_, err := f.admin.ExecContext(ctx, `CREATE DATABASE `+pgsql.QuoteIdent(name)+` TEMPLATE `+pgsql.QuoteIdent(template))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && attempt < 50 { // object_in_use
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("creating database %s from %s: %w", name, template, err)
		}
		return nil
	}
}

// writeFile writes the databases file of every tenant.
func (f *fleetDBs) writeFile() error {
	type tenant struct {
		Name        string `json:"name"`
		DatabaseURL string `json:"database_url"`
	}
	var file struct {
		Tenants []tenant `json:"tenants"`
	}
	for _, t := range f.tenants {
		file.Tenants = append(file.Tenants, tenant{Name: t, DatabaseURL: f.url(f.database(t))})
	}
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the databases file: %w", err)
	}
	if err := os.WriteFile(f.file, b, 0o600); err != nil {
		return fmt.Errorf("writing the databases file: %w", err)
	}
	return nil
}

// open opens a pool of at most conns connections on tenant's database
// and an ent client on it; closing the client closes the pool.
func (f *fleetDBs) open(tenant string, conns int) (*sql.DB, *testent.Client, error) {
	db, err := sql.Open("pgx", withApplicationName(f.url(f.database(tenant)), benchApplicationName))
	if err != nil {
		return nil, nil, fmt.Errorf("opening the database of tenant %s: %w", tenant, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db))), nil
}

// sessions is how many sessions the server has opened on the run's
// databases so far (pg_stat_database, which counts a session when it
// ends).
func (f *fleetDBs) sessions(ctx context.Context) (int64, error) {
	var n int64
	err := f.admin.QueryRowContext(ctx, `SELECT coalesce(sum(sessions), 0)::bigint FROM pg_stat_database
		WHERE left(datname, length($1)) = $1`, f.prefix).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("reading the sessions of the tenants' databases: %w", err)
	}
	return n, nil
}

// drop drops every database of the run, even after an interrupt, and the
// databases file. WITH (FORCE) ends a session a killed relay left.
func (f *fleetDBs) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := f.admin.QueryContext(ctx, `SELECT datname FROM pg_database WHERE left(datname, length($1)) = $1`, f.prefix)
	if err == nil {
		var names []string
		for rows.Next() {
			var n string
			if rows.Scan(&n) == nil {
				names = append(names, n)
			}
		}
		rows.Close()
		if len(names) > 10 && f.progress != nil {
			f.progress("dropping %d databases", len(names))
		}
		for _, n := range names {
			_, _ = f.admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+pgsql.QuoteIdent(n)+` WITH (FORCE)`)
		}
	}
	if f.dir != "" {
		os.RemoveAll(f.dir)
	}
}
