package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

func TestConsoleRefusesNonLoopbackWithoutToken(t *testing.T) {
	_, err := run(t, nil, "console", "--addr", "0.0.0.0:8080", "--database-url", pgtest.DefaultURL)
	require.ErrorContains(t, err, "console: address 0.0.0.0:8080 is not a loopback address")
	require.ErrorContains(t, err, "set --token")
	_, err = run(t, nil, "console", "--addr", ":8080", "--database-url", pgtest.DefaultURL)
	require.ErrorContains(t, err, "listens on every interface")
}

// The console serves the tables --table and --dead-letter-table name.
func TestConsoleServes(t *testing.T) {
	db := pgtest.New(t)
	pgtest.Migrate(t, ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
	shopTables(t, db)
	_, err := db.DB.Exec(`INSERT INTO shop_outbox (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}' FROM generate_series(1, 2) g`)
	require.NoError(t, err)
	pr, pw := io.Pipe()
	cmd := newRootCommand()
	cmd.SetOut(pw)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"console", "--addr", "127.0.0.1:0", "--database-url", db.URL, "--table", "shop_outbox",
		"--dead-letter-table", "shop_letters"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	u := strings.TrimSpace(strings.TrimPrefix(line, "entoutbox console on "))
	require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), line)
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	resp, err := http.Get(u)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `id="pending">2<`, "shop_outbox's backlog")
	require.Regexp(t, `id="open-letters"><a [^>]*>0<`, string(body), "shop_letters has none")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("the console did not stop")
	}
}

// With --databases-file the console serves the tenants of the file: the
// tenants page, and a tenant's overview under /t/{tenant}/; the file is
// read again on each request. --database-url is refused with it.
func TestConsoleServesTheTenantsOfADatabasesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "databases.json")
	_, err := run(t, nil, "console", "--databases-file", file, "--database-url", pgtest.DefaultURL)
	require.ErrorContains(t, err, "--database-url cannot go with --databases-file")
	_, err = run(t, nil, "console", "--databases-file", file)
	require.ErrorContains(t, err, "reading the databases file")

	acme, globex := outboxDB(t), outboxDB(t)
	_, err = acme.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}' FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	write := func(tenants ...fleet.Tenant) {
		data, err := json.Marshal(fleet.File{Tenants: tenants})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file+".tmp", data, 0o600))
		require.NoError(t, os.Rename(file+".tmp", file))
	}
	write(fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acme.Schema})
	pr, pw := io.Pipe()
	cmd := newRootCommand()
	cmd.SetOut(pw)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"console", "--addr", "127.0.0.1:0", "--databases-file", file})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	u := strings.TrimSpace(strings.TrimPrefix(line, "entoutbox console on "))
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	getPage := func(path string) (int, string) {
		resp, err := http.Get(strings.TrimSuffix(u, "/") + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := getPage("/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="tenant-acme"`)
	require.Contains(t, body, "1 of 1 read")
	code, body = getPage("/t/acme/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="pending">3<`)

	write(fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acme.Schema},
		fleet.Tenant{Name: "globex", DatabaseURL: pgtest.ServerURL(), Schema: globex.Schema})
	code, body = getPage("/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "2 of 2 read", "the file read again")
	code, body = getPage("/t/globex/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="pending">0<`)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("the console did not stop")
	}
}

// With --registry-database-url the console serves the tenants of the
// registry table, read again on each request.
func TestConsoleServesTheTenantsOfARegistry(t *testing.T) {
	acme := outboxDB(t)
	registry := pgtest.New(t)
	_, err := registry.DB.Exec(fleet.RegistryTableDDL(fleet.DefaultRegistryTable))
	require.NoError(t, err)
	pr, pw := io.Pipe()
	cmd := newRootCommand()
	cmd.SetOut(pw)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"console", "--addr", "127.0.0.1:0", "--registry-database-url", registry.URL})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	u := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "entoutbox console on ")), "/")
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	page := func(path string) string {
		resp, err := http.Get(u + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return string(body)
	}
	require.Contains(t, page("/"), "0 of 0 read")
	_, err = registry.DB.Exec(`INSERT INTO entoutbox_tenants (name, database_url, schema) VALUES ('acme', $1, $2)`,
		pgtest.ServerURL(), acme.Schema)
	require.NoError(t, err)
	require.Contains(t, page("/"), `id="tenant-acme"`, "the table read again")
	require.Contains(t, page("/t/acme/"), `id="pending">0<`)
	cancel()
	require.NoError(t, <-done)
}
