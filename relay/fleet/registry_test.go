package fleet_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// Tenants listed in a registry table are relayed beside the file's: a
// row inserted starts its tenant's relay, a row deleted stops it; a bad
// row, or a name also in the file, is refused whole with the row named,
// and the tenants of the last good read go on.
func TestFleetReadsTheRegistryTable(t *testing.T) {
	t.Parallel()
	acme, globex, initech := newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true)
	registry := pgtest.New(t)
	_, err := registry.DB.Exec(fleet.RegistryTableDDL("tenants"))
	require.NoError(t, err)
	insert := func(tn fleet.Tenant) {
		t.Helper()
		_, err := registry.DB.Exec(`INSERT INTO tenants (name, database_url, schema) VALUES ($1, $2, $3)`, tn.Name, tn.DatabaseURL, tn.Schema)
		require.NoError(t, err)
	}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, acme.bySchema("acme"))
	insert(globex.bySchema("globex"))
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Registry: registry.DB, RegistryTable: "tenants", Relay: relay.Config{Publisher: pubsub}})

	wantAcme, wantGlobex := acme.emit(t, "acme", 10, 2), globex.emit(t, "globex", 10, 2)
	got.waitFor(t, wantAcme)
	got.waitFor(t, wantGlobex)

	insert(initech.byURL("initech"))
	wantInitech := initech.emit(t, "initech", 10, 2)
	got.waitFor(t, wantInitech)

	insert(fleet.Tenant{Name: "broken", DatabaseURL: "mysql://root@127.0.0.1/app"})
	require.Eventually(t, func() bool { _, e := f.Status(); return e != "" }, patience, 50*time.Millisecond, "the bad row is refused")
	_, fileErr := f.Status()
	require.Contains(t, fileErr, `registry table tenants: row "broken": database_url has scheme "mysql"`)
	more := initech.emit(t, "initech", 5, 1) // the last good tenants go on
	got.waitFor(t, more)
	for agg, ids := range more {
		wantInitech[agg] = append(wantInitech[agg], ids...)
	}
	_, err = registry.DB.Exec(`DELETE FROM tenants WHERE name = 'broken'`)
	require.NoError(t, err)

	insert(fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acme.db.Schema})
	require.Eventually(t, func() bool {
		_, e := f.Status()
		return e != "" && e != fileErr
	}, patience, 50*time.Millisecond, "a name in both the file and the table is refused")
	_, fileErr = f.Status()
	require.Contains(t, fileErr, `registry table tenants: row "acme": the name is also a tenant of the databases file`)
	_, err = registry.DB.Exec(`DELETE FROM tenants WHERE name IN ('acme', 'globex')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, listed := tenantState(f, "globex")
		_, e := f.Status()
		return !listed && e == ""
	}, patience, 50*time.Millisecond, "globex's relay stops once its row is gone")
	_, listed := tenantState(f, "acme")
	require.True(t, listed, "acme, in the file, is relayed still")

	got.requireExactly(t, "acme", wantAcme, false)
	got.requireExactly(t, "globex", wantGlobex, false)
	got.requireExactly(t, "initech", wantInitech, false)
}

// A registry alone is a source; a registry table that is missing stops
// the fleet at its start with the statement that makes it.
func TestFleetRegistryAloneAndMissing(t *testing.T) {
	t.Parallel()
	acme := newTenantDB(t, true)
	registry := pgtest.New(t)
	pubsub, got := receive(t)
	f, err := fleet.New(fleet.Config{Registry: registry.DB, Relay: relay.Config{Publisher: pubsub}})
	require.NoError(t, err)
	err = f.Run(t.Context())
	require.ErrorContains(t, err, `registry table entoutbox_tenants: `)
	require.ErrorContains(t, err, "make it with:\nCREATE TABLE entoutbox_tenants (")

	_, err = fleet.New(fleet.Config{Registry: registry.DB, RegistryTable: `bad"name`, Relay: relay.Config{Publisher: pubsub}})
	require.EqualError(t, err, `fleet: registry table "bad\"name": want a lowercase unquoted name, or schema.table`)

	_, err = registry.DB.Exec(fleet.RegistryTableDDL(fleet.DefaultRegistryTable))
	require.NoError(t, err)
	_, err = registry.DB.Exec(`INSERT INTO entoutbox_tenants (name, database_url, schema) VALUES ('acme', $1, $2)`,
		pgtest.ServerURL(), acme.db.Schema)
	require.NoError(t, err)
	runFleet(t, fleet.Config{Registry: registry.DB, Relay: relay.Config{Publisher: pubsub}})
	want := acme.emit(t, "acme", 10, 2)
	got.waitFor(t, want)
	got.requireExactly(t, "acme", want, false)
}
