package fleet_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// With Config.Metrics, each tenant's relay counts under its tenant label,
// the first MetricsTenants tenants by name under their own and the rest
// summed under _other; the tenants' states are gauges under the same
// labels, a failing tenant's counted as down and failed.
func TestFleetMetricsPerTenant(t *testing.T) {
	t.Parallel()
	acme, globex, initech := newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true)
	bare := newTenantDB(t, false) // fails: no tables
	file := filepath.Join(t.TempDir(), "databases.json")
	// Not in the order of their names: the label goes by name.
	writeFile(t, file, bare.bySchema("zeta"), initech.bySchema("initech"), globex.bySchema("globex"), acme.bySchema("acme"))
	pubsub, got := receive(t)
	reg := prometheus.NewRegistry()
	runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, Metrics: reg, MetricsTenants: 2})

	wantAcme, wantGlobex, wantInitech := acme.emit(t, "acme", 5, 1), globex.emit(t, "globex", 3, 1), initech.emit(t, "initech", 4, 1)
	got.waitFor(t, wantAcme)
	got.waitFor(t, wantGlobex)
	got.waitFor(t, wantInitech)
	published := func(tenant string) float64 {
		return promtest.Value(t, reg, "entoutbox_relay_published_total", "tenant", tenant, "result", "ok")
	}
	require.Eventually(t, func() bool {
		return published("acme") == 5 && published("globex") == 3 && published(fleet.OtherTenants) == 4
	},
		patience, 50*time.Millisecond, "acme, globex and the rest count apart")
	require.Equal(t, []string{fleet.OtherTenants, "acme", "globex"}, tenantLabels(t, reg, "entoutbox_relay_published_total"),
		"2 tenants keep their label, the others are one")

	up := func(tenant string) float64 {
		return promtest.Value(t, reg, "entoutbox_fleet_tenant_up", "tenant", tenant)
	}
	require.Eventually(t, func() bool {
		return up("acme") == 1 && up("globex") == 1 && up(fleet.OtherTenants) == 1 &&
			promtest.Value(t, reg, "entoutbox_fleet_tenant_down", "tenant", fleet.OtherTenants) == 1 &&
			promtest.Value(t, reg, "entoutbox_fleet_tenant_down", "tenant", "acme") == 0 &&
			promtest.Value(t, reg, "entoutbox_fleet_tenants", "state", "failed") == 1 &&
			promtest.Value(t, reg, "entoutbox_fleet_tenant_failures", "tenant", fleet.OtherTenants) >= 1
	}, patience, 50*time.Millisecond, "initech is up, zeta failed; both under _other")
	require.Equal(t, []string{fleet.OtherTenants, "acme", "globex"}, tenantLabels(t, reg, "entoutbox_fleet_tenant_up"))
	require.Equal(t, float64(3), promtest.Value(t, reg, "entoutbox_fleet_tenants", "state", "running"))
}

// tenantLabels is the values of the label tenant on the series of name,
// sorted, each once.
func tenantLabels(t *testing.T, g prometheus.Gatherer, name string) []string {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && !slices.Contains(out, l.GetValue()) {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
