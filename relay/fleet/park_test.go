package fleet_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// The idle bound of these tests: short, so that tenants park within the
// test.
const testIdleAfter = 300 * time.Millisecond

// waitState waits until tenant name is in state.
func waitState(t *testing.T, f *fleet.Fleet, name string, state fleet.State) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, _ := tenantState(f, name)
		return s.State == state
	}, patience, 10*time.Millisecond, "tenant %s is %s", name, state)
}

// serverConnections counts the server's connections of application name
// app.
func serverConnections(t *testing.T, d *tenantDB, app string) int {
	t.Helper()
	var n int
	require.NoError(t, d.db.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
	return n
}

// Tenants idle past IdleAfter are parked, and the fleet then holds no
// connection of theirs: the prober's, opened for each probe and closed
// after it, is all that shows now and then. An event emitted to a parked
// tenant then arrives, once, with its tenant, and its relay runs again;
// the other tenant stays parked.
func TestFleetParksIdleTenantsAndWakesThem(t *testing.T) {
	t.Parallel()
	dbs := []*tenantDB{newTenantDB(t, true), newTenantDB(t, true)}
	names := []string{"acme", "globex"}
	app := "fleet_park_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	entries := make([]fleet.Tenant, len(dbs))
	for i, d := range dbs {
		entries[i] = d.bySchema(names[i])
		entries[i].DatabaseURL = withParam(t, entries[i].DatabaseURL, "application_name", app+"_"+names[i])
	}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, entries...)
	before := dbs[0].emit(t, names[0], 5, 1)
	pubsub, got := receive(t)
	// Probes far apart beside the samples: a probe's connection, open for
	// moments, is seen in few of them even on a busy machine.
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, IdleAfter: testIdleAfter,
		ProbeInterval: 400 * time.Millisecond})
	got.waitFor(t, before)
	for _, name := range names {
		waitState(t, f, name, fleet.StateParked)
	}
	for i, name := range names {
		zero := 0
		for range 20 { // the relay's pool held its claims' connection in every sample
			if serverConnections(t, dbs[i], app+"_"+name) == 0 {
				zero++
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("tenant %s parked: no connection in %d of 20 samples", name, zero)
		require.GreaterOrEqual(t, zero, 10, "parked tenant %s holds no connection between probes", name)
	}

	want := dbs[0].emit(t, names[0], 5, 1)
	got.waitFor(t, want)
	time.Sleep(time.Second) // room for a duplicate to show
	for agg, ids := range want {
		want[agg] = append(before[agg], ids...)
	}
	got.requireExactly(t, names[0], want, false)
	s, _ := tenantState(f, names[1])
	require.Equal(t, fleet.StateParked, s.State, "the tenant without work stays parked")
	require.Eventually(t, func() bool {
		s, _ := tenantState(f, names[0])
		return s.State == fleet.StateRunning || s.State == fleet.StateParked
	}, patience, 10*time.Millisecond, "the woken tenant ran, and may be parked again")
}

// A scheduled event that becomes due in a parked tenant arrives: the
// prober sees it due, and the woken relay moves it into the outbox. Two
// tenants of one database by schema: one probe reads both.
func TestFleetWakesAParkedTenantForAScheduledEvent(t *testing.T) {
	t.Parallel()
	dbs := []*tenantDB{newTenantDB(t, true), newTenantDB(t, true)}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, dbs[0].bySchema("acme"), dbs[1].bySchema("globex"))
	ctx := context.Background()
	var id uuid.UUID
	const after = 4 * time.Second
	require.NoError(t, dbs[0].client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "acme-order-later", testent.OrderPaid{OrderID: 1, AmountCents: 100},
			events.DeliverAfter(after), events.ReturnEventID(&id))
	}))
	emitted := time.Now()
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, IdleAfter: testIdleAfter})
	waitState(t, f, "acme", fleet.StateParked)
	waitState(t, f, "globex", fleet.StateParked)
	if time.Since(emitted) >= after {
		t.Skip("the tenant parked after its event was due already: the machine is too slow for this test")
	}
	require.False(t, got.got(id.String()), "not delivered before it is due")
	got.waitFor(t, map[string][]string{"acme-order-later": {id.String()}})
	time.Sleep(500 * time.Millisecond)
	got.requireExactly(t, "acme", map[string][]string{"acme-order-later": {id.String()}}, false)
	s, _ := tenantState(f, "globex")
	require.Equal(t, fleet.StateParked, s.State, "the tenant without work stays parked")
}

// A tenant without work starts parked: its relay never starts, and the
// fleet opens no connection of its own but the prober's, one at a time.
func TestFleetStartsATenantWithoutWorkParked(t *testing.T) {
	t.Parallel()
	d := newTenantDB(t, true)
	app := "fleet_start_parked_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	entry := d.bySchema("acme")
	entry.DatabaseURL = withParam(t, entry.DatabaseURL, "application_name", app)
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, entry)
	peak := watchConnections(t, d.db.DB, app)
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, IdleAfter: time.Minute})
	waitState(t, f, "acme", fleet.StateParked)
	time.Sleep(2 * time.Second) // probes, every 100 ms
	require.LessOrEqual(t, peak(app), 1, "a parked tenant's connections: the probe's, one at a time")
	want := d.emit(t, "acme", 3, 1)
	got.waitFor(t, want)
	got.requireExactly(t, "acme", want, false)
	waitState(t, f, "acme", fleet.StateRunning)
}

// A tenant with a steady trickle of events is never parked, while an
// idle one beside it is.
func TestFleetDoesNotParkABusyTenant(t *testing.T) {
	t.Parallel()
	dbs := []*tenantDB{newTenantDB(t, true), newTenantDB(t, true)}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, dbs[0].bySchema("busy"), dbs[1].bySchema("idle"))
	pubsub, got := receive(t)
	want := dbs[0].emit(t, "busy", 1, 1) // a tenant starts parked: this wakes it
	const idleAfter = 2 * time.Second    // ten times the events' spacing: room for a busy machine
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, IdleAfter: idleAfter})
	waitState(t, f, "busy", fleet.StateRunning)
	var parked atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			if s, _ := tenantState(f, "busy"); s.State == fleet.StateParked {
				parked.Store(true)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for range 4 * idleAfter / (200 * time.Millisecond) { // an event every 200ms for 4 idle bounds
		for agg, ids := range dbs[0].emit(t, "busy", 1, 1) {
			want[agg] = append(want[agg], ids...)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	<-watched
	require.False(t, parked.Load(), "the busy tenant was never parked")
	got.waitFor(t, want)
	got.requireExactly(t, "busy", want, false)
	waitState(t, f, "idle", fleet.StateParked)
}
