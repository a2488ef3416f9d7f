package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// writeDatabasesFile writes a databases file of tenants in a directory of
// the test's, and returns its path.
func writeDatabasesFile(t *testing.T, tenants ...fleet.Tenant) string {
	t.Helper()
	data, err := json.Marshal(fleet.File{Tenants: tenants})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "databases.json")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	return file
}

// status --databases-file prints one line per tenant and a total, text
// and JSON; a tenant whose schema lacks the tables, or whose database is
// down, is named on its line with its error while the others are shown,
// and the command fails naming it.
func TestStatusDatabasesFile(t *testing.T) {
	t.Parallel()
	acmeDB, acmeClient := letterDB(t)
	acme := statusDB{DB: acmeDB.DB, URL: acmeDB.URL, client: acmeClient}
	acme.pending(t, "orders", 3, 90*time.Second, "")
	addLetter(t, acmeClient, "billing", "a bug", time.Now())
	addLetter(t, acmeClient, "relay", "refused", time.Now())
	acme.position(t, "billing", "orders", "7", 1, uuid.New(), time.Minute)
	globexDB, globexClient := letterDB(t)
	globex := statusDB{DB: globexDB.DB, URL: globexDB.URL, client: globexClient}
	globex.pending(t, "orders", 1, 10*time.Second, "")
	bare := pgtest.New(t) // a schema without the outbox's tables
	file := writeDatabasesFile(t,
		fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acmeDB.Schema},
		fleet.Tenant{Name: "bare", DatabaseURL: pgtest.ServerURL(), Schema: bare.Schema},
		fleet.Tenant{Name: "down", DatabaseURL: "postgres://postgres@127.0.0.1:1/none?connect_timeout=5"},
		fleet.Tenant{Name: "globex", DatabaseURL: globexDB.URL})

	out, err := run(t, nil, "status", "--databases-file", file)
	require.Error(t, err)
	require.Contains(t, err.Error(), "tenant bare: not read: ")
	require.Contains(t, err.Error(), "outbox_events")
	require.Contains(t, err.Error(), "tenant down: not read: ")
	require.NotContains(t, err.Error(), "tenant acme")
	require.NotContains(t, err.Error(), "tenant globex")
	require.Regexp(t, `(?m)^acme    pending 3, oldest 1m[3-5]\d\.\d+s, dead letters 2, held aggregates 1$`, out)
	require.Regexp(t, `(?m)^bare    NOT READ: .*outbox_events`, out)
	require.Regexp(t, `(?m)^down    NOT READ: `, out)
	require.Regexp(t, `(?m)^globex  pending 1, oldest 1\d\.\d+s, dead letters 0, held aggregates 0$`, out)
	require.Regexp(t, `(?m)^total   pending 4, oldest 1m[3-5]\d\.\d+s, dead letters 2, held aggregates 1 \(2 of 4 tenants read\)$`, out)

	out, err = run(t, nil, "status", "--databases-file", file, "--json")
	require.Error(t, err)
	var res struct {
		Tenants []struct {
			Tenant, Error  string
			Pending        int64
			Age            float64 `json:"oldest_pending_age_seconds"`
			DeadLetters    int64   `json:"dead_letters"`
			HeldAggregates int64   `json:"held_aggregates"`
			Problems       []string
		}
		Total struct {
			Tenant  string
			Pending int64
		}
		Problems []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Tenants, 4)
	a, b, d, g := res.Tenants[0], res.Tenants[1], res.Tenants[2], res.Tenants[3]
	require.Equal(t, []string{"acme", "bare", "down", "globex"}, []string{a.Tenant, b.Tenant, d.Tenant, g.Tenant})
	require.Equal(t, []int64{3, 2, 1}, []int64{a.Pending, a.DeadLetters, a.HeldAggregates})
	require.GreaterOrEqual(t, a.Age, 89.0)
	require.Empty(t, a.Error)
	require.Empty(t, a.Problems)
	require.Contains(t, b.Error, "outbox_events")
	require.NotEmpty(t, d.Error)
	require.Equal(t, int64(1), g.Pending)
	require.Equal(t, int64(4), res.Total.Pending)
	require.Equal(t, "2 of 4 tenants read", res.Total.Tenant)
	require.Len(t, res.Problems, 2)
}

// The thresholds apply to each tenant, and the command fails naming the
// tenants over them, only those.
func TestStatusDatabasesFileThresholds(t *testing.T) {
	t.Parallel()
	acmeDB, acmeClient := letterDB(t)
	acme := statusDB{DB: acmeDB.DB, URL: acmeDB.URL, client: acmeClient}
	acme.pending(t, "orders", 1, 90*time.Second, "")
	globexDB, globexClient := letterDB(t)
	addLetter(t, globexClient, "billing", "a bug", time.Now())
	addLetter(t, globexClient, "billing", "a bug", time.Now())
	file := writeDatabasesFile(t,
		fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acmeDB.Schema},
		fleet.Tenant{Name: "globex", DatabaseURL: globexDB.URL})
	status := func(args ...string) (string, error) {
		return run(t, nil, append([]string{"status", "--databases-file", file}, args...)...)
	}

	_, err := status("--max-age", "5m", "--max-dead-letters", "2")
	require.NoError(t, err, "within the thresholds")
	out, err := status("--max-age", "1m")
	require.Error(t, err)
	require.Regexp(t, `^status: tenant acme: the oldest pending event has waited 1m[3-5]\d\.\d+s, more than the maximum age 1m0s$`, err.Error())
	require.Regexp(t, `(?m)^acme    pending 1, .*  OVER: the oldest pending event`, out)
	require.Regexp(t, `(?m)^globex  pending 0, oldest 0s, dead letters 2, held aggregates 0$`, out)
	_, err = status("--max-dead-letters", "1")
	require.EqualError(t, err, "status: tenant globex: 2 open dead letters, more than the maximum 1")
	out, err = status("--max-age", "1m", "--max-dead-letters", "0", "--json")
	require.Error(t, err)
	var res struct{ Problems []string }
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Problems, 2)
	require.True(t, strings.HasPrefix(res.Problems[0], "tenant acme: the oldest pending event"), res.Problems[0])
	require.Equal(t, "tenant globex: 2 open dead letters, more than the maximum 0", res.Problems[1])
}

// --database-url (or ENTOUTBOX_DATABASE_URL) is refused with
// --databases-file, before anything is read.
func TestStatusDatabasesFileRefusesDatabaseURL(t *testing.T) {
	file := filepath.Join(t.TempDir(), "absent.json")
	_, err := run(t, nil, "status", "--databases-file", file, "--database-url", "postgres://127.0.0.1/app")
	require.EqualError(t, err, "--database-url cannot go with --databases-file: the databases are the file's; drop one of them")
	_, err = run(t, map[string]string{"ENTOUTBOX_DATABASE_URL": "postgres://127.0.0.1/app"}, "status", "--databases-file", file)
	require.EqualError(t, err, "ENTOUTBOX_DATABASE_URL (--database-url) cannot go with --databases-file: the databases are the file's; drop one of them")
}

// status --registry-database-url reads the tenants of the registry table
// too, beside those of the file, a line each.
func TestStatusRegistryTable(t *testing.T) {
	t.Parallel()
	acmeDB, acmeClient := letterDB(t)
	acme := statusDB{DB: acmeDB.DB, URL: acmeDB.URL, client: acmeClient}
	acme.pending(t, "orders", 2, 30*time.Second, "")
	globexDB, globexClient := letterDB(t)
	globex := statusDB{DB: globexDB.DB, URL: globexDB.URL, client: globexClient}
	globex.pending(t, "orders", 1, 10*time.Second, "")
	registry := pgtest.New(t)
	_, err := registry.DB.Exec(fleet.RegistryTableDDL("tenants"))
	require.NoError(t, err)
	_, err = registry.DB.Exec(`INSERT INTO tenants (name, database_url, schema) VALUES ('globex', $1, '')`, globexDB.URL)
	require.NoError(t, err)
	file := writeDatabasesFile(t, fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acmeDB.Schema})

	out, err := run(t, nil, "status", "--databases-file", file, "--registry-database-url", registry.URL, "--registry-table", "tenants")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^acme    pending 2, `, out)
	require.Regexp(t, `(?m)^globex  pending 1, `, out)
	require.Regexp(t, `(?m)^total   pending 3, .*\(2 of 2 tenants read\)$`, out)

	_, err = run(t, nil, "status", "--registry-database-url", registry.URL)
	require.ErrorContains(t, err, "status: fleet: registry table entoutbox_tenants: ")
	require.ErrorContains(t, err, "make it with:")
}
