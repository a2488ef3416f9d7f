package fleet_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// failingPublisher refuses every message: the rows the tenants emit stay
// pending.
type failingPublisher struct{}

func (failingPublisher) Publish(string, ...*message.Message) error {
	return errors.New("the broker refuses in this test")
}
func (failingPublisher) Close() error { return nil }

// deadLetter writes n open dead letters into the tenant's schema.
func (d *tenantDB) deadLetter(t *testing.T, n int) {
	t.Helper()
	for range n {
		_, err := d.db.DB.Exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at)
			VALUES ($1, 'relay', 'x', 1, now())`, uuid.NewString())
		require.NoError(t, err)
	}
}

// WatchBacklogs serves each tenant's pending events, oldest age and open
// dead letters under its label, the tenants past the bound summed under
// _other; a tenant that cannot be read (no tables, database down) is
// counted unread and has no backlog gauges while the others are served;
// one that stops being readable loses its gauges rather than keep its
// last ones, and gets them back once it is readable again.
func TestFleetBacklogPerTenant(t *testing.T) {
	t.Parallel()
	acme, globex, initech, zeta := newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true)
	bare := newTenantDB(t, false)
	down := fleet.Tenant{Name: "down", DatabaseURL: "postgres://postgres@127.0.0.1:1/test?connect_timeout=5"}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, acme.bySchema("acme"), bare.bySchema("bare"), down, globex.bySchema("globex"),
		initech.byURL("initech"), zeta.bySchema("zeta"))
	acme.emit(t, "acme", 2, 1)
	acme.deadLetter(t, 1)
	initech.emit(t, "initech", 1, 1)
	zeta.emit(t, "zeta", 2, 2)
	zeta.deadLetter(t, 2)

	reg := prometheus.NewPedanticRegistry()
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: failingPublisher{}, MaxAttempts: 1 << 20},
		Metrics: reg, MetricsTenants: 4})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, f.WatchBacklogs(ctx, fleet.BacklogConfig{Interval: 100 * time.Millisecond}))

	v := func(name, tenant string) float64 { return promtest.Value(t, reg, name, "tenant", tenant) }
	has := func(name, tenant string) bool { return promtest.Present(t, reg, name, "tenant", tenant) }
	require.Eventually(t, func() bool {
		return v("entoutbox_fleet_tenant_pending_events", "acme") == 2 &&
			v("entoutbox_fleet_tenant_pending_events", fleet.OtherTenants) == 3 &&
			v("entoutbox_fleet_tenant_backlog_unread", "bare") == 1 && v("entoutbox_fleet_tenant_backlog_unread", "down") == 1
	}, patience, 50*time.Millisecond, "acme and _other read, bare and down unread")

	require.Equal(t, float64(1), v("entoutbox_fleet_tenant_dead_letters", "acme"))
	require.Equal(t, float64(2), v("entoutbox_fleet_tenant_dead_letters", fleet.OtherTenants), "zeta's, summed with initech's none")
	require.Greater(t, v("entoutbox_fleet_tenant_oldest_pending_age_seconds", "acme"), float64(0))
	require.True(t, has("entoutbox_fleet_tenant_pending_events", "globex"))
	require.Equal(t, float64(0), v("entoutbox_fleet_tenant_pending_events", "globex"), "globex has nothing pending")
	require.Equal(t, float64(0), v("entoutbox_fleet_tenant_oldest_pending_age_seconds", "globex"))
	require.Equal(t, float64(0), v("entoutbox_fleet_tenant_backlog_unread", "acme"))
	require.Equal(t, float64(0), v("entoutbox_fleet_tenant_backlog_unread", fleet.OtherTenants))
	for _, name := range []string{"entoutbox_fleet_tenant_pending_events", "entoutbox_fleet_tenant_oldest_pending_age_seconds",
		"entoutbox_fleet_tenant_dead_letters", "entoutbox_fleet_tenant_held_aggregates"} {
		require.False(t, has(name, "bare"), "%s of a tenant without tables", name)
		require.False(t, has(name, "down"), "%s of a tenant whose database is down", name)
	}
	require.Equal(t, []string{fleet.OtherTenants, "acme", "bare", "down", "globex"},
		tenantLabels(t, reg, "entoutbox_fleet_tenant_backlog_unread"))

	// acme's outbox goes away: its figures go with it.
	_, err := acme.db.DB.Exec(`ALTER TABLE outbox_events RENAME TO outbox_events_away`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return v("entoutbox_fleet_tenant_backlog_unread", "acme") == 1 && !has("entoutbox_fleet_tenant_pending_events", "acme")
	}, patience, 50*time.Millisecond, "acme unread, its last figures not served")
	require.Greater(t, v("entoutbox_fleet_tenant_backlog_sample_age_seconds", "down"), float64(0))
	_, err = acme.db.DB.Exec(`ALTER TABLE outbox_events_away RENAME TO outbox_events`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return v("entoutbox_fleet_tenant_backlog_unread", "acme") == 0 && v("entoutbox_fleet_tenant_pending_events", "acme") == 2
	}, patience, 50*time.Millisecond, "acme read again")
}

// countingOpens counts the pools opened on each URL.
type countingOpens struct {
	mu    sync.Mutex
	opens map[string]int
}

func (c *countingOpens) open(databaseURL string) (*sql.DB, error) {
	c.mu.Lock()
	c.opens[databaseURL]++
	c.mu.Unlock()
	return pgdial.Open(databaseURL, pgdial.Options{ApplicationName: "fleet backlog test"})
}

func (c *countingOpens) of(databaseURL string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens[databaseURL]
}

// The tenants of one database URL are read on one pool opened for the
// read: three schemas of the server's URL, one open for them all. The
// read waits for the fleet to list its tenants, not a whole interval.
func TestFleetBacklogReadsOneURLAtOnce(t *testing.T) {
	t.Parallel()
	a, b, c := newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true)
	a.emit(t, "a", 1, 1)
	b.emit(t, "b", 2, 1)
	c.emit(t, "c", 3, 1)
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, a.bySchema("a"), b.bySchema("b"), c.bySchema("c"))
	opens := &countingOpens{opens: map[string]int{}}
	reg := prometheus.NewPedanticRegistry()
	// Parked from the start and never probed: no relay opens the
	// server's URL, only the backlog's reads do.
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: failingPublisher{}}, Metrics: reg,
		IdleAfter: time.Hour, ProbeInterval: time.Hour, Open: opens.open})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, f.WatchBacklogs(ctx, fleet.BacklogConfig{Interval: time.Hour}))
	v := func(tenant string) float64 {
		return promtest.Value(t, reg, "entoutbox_fleet_tenant_pending_events", "tenant", tenant)
	}
	require.Eventually(t, func() bool { return v("a") == 1 && v("b") == 2 && v("c") == 3 },
		patience, 50*time.Millisecond, "each schema read in its own search_path")
	require.Equal(t, 1, opens.of(pgtest.ServerURL()), "one pool for the three schemas of one URL")
	for _, name := range []string{"a", "b", "c"} {
		s, ok := tenantState(f, name)
		require.True(t, ok)
		require.Equal(t, fleet.StateParked, s.State, "reading the backlog does not wake a tenant")
	}
}

// WatchBacklogs serves the backlog with the fleet's metrics alone.
func TestFleetBacklogNeedsMetrics(t *testing.T) {
	t.Parallel()
	f, err := fleet.New(fleet.Config{File: "x.json", Relay: relay.Config{Publisher: failingPublisher{}}})
	require.NoError(t, err)
	require.ErrorContains(t, f.WatchBacklogs(context.Background(), fleet.BacklogConfig{}), "Config.Metrics is nil")
}
