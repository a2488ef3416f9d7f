package fleet_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// More tenants with work than the budget runs at once: they take turns.
// With a budget of 6 connections, 2 relays run at once (3 each); five
// tenants with a backlog, two of them written to all along, all get
// their events through, once each and in order; the server never sees
// more than the budget of the relays' connections (and the prober's one,
// and one closed connection whose server process is still exiting),
// no more than 2 relays run at once, and tenants are seen waiting.
func TestFleetTenantsTakeTurnsWithinTheBudget(t *testing.T) {
	t.Parallel()
	names := []string{"acme", "globex", "initech", "umbrella", "hooli"}
	app := "fleet_turns_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	dbs := make([]*tenantDB, len(names))
	entries := make([]fleet.Tenant, len(names))
	want := make([]map[string][]string, len(names))
	for i, n := range names {
		dbs[i] = newTenantDB(t, true)
		entries[i] = dbs[i].bySchema(n)
		entries[i].DatabaseURL = withParam(t, entries[i].DatabaseURL, "application_name", app+"_"+n)
		want[i] = dbs[i].emit(t, n, 60, 3)
	}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, entries...)
	require.Equal(t, 2, fleet.RelaysAtOnce(6, false))
	require.Equal(t, 3, fleet.ConnectionsPerTenant(6, len(names), false))

	peak := watchTotalConnections(t, dbs[0].db.DB, app)
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, MaxConnections: 6,
		Turn: 300 * time.Millisecond, IdleAfter: testIdleAfter, ProbeConcurrency: 1})
	states := watchStates(t, f)

	ctx, stop := context.WithCancel(context.Background())
	const busyTenants = 2 // as many as run at once: without turns, they would hold the room for good
	busy := make([]chan map[string][]string, busyTenants)
	for i := range busyTenants {
		busy[i] = make(chan map[string][]string, 1)
		go func() { // written to until the others are through
			out := map[string][]string{}
			for ctx.Err() == nil {
				for agg, ids := range dbs[i].emit(t, names[i], 1, 1) {
					out[agg] = append(out[agg], ids...)
				}
				time.Sleep(5 * time.Millisecond)
			}
			busy[i] <- out
		}()
	}
	for i := busyTenants; i < len(names); i++ {
		got.waitFor(t, want[i])
	}
	stop()
	for i := range busyTenants {
		for agg, ids := range <-busy[i] {
			want[i][agg] = append(want[i][agg], ids...)
		}
	}
	for i := range busyTenants {
		got.waitFor(t, want[i])
	}
	time.Sleep(500 * time.Millisecond) // room for a duplicate to show
	for i, n := range names {
		got.requireExactly(t, n, want[i], false)
	}
	most, waited := states()
	t.Logf("at most %d relays at once, %d tenants seen waiting, at most %d connections", most, waited, peak())
	require.LessOrEqual(t, most, 2, "relays running at once")
	require.Positive(t, waited, "no tenant waited for its turn")
	// The server lists a closed connection until its process has exited,
	// a moment after the client let go: on a loaded machine, one ended
	// run's or probe's connection can still show beside its successor's.
	const exiting = 1
	require.LessOrEqual(t, peak(), 6+1+exiting, "the relays' connections stay within the budget (and the prober's one, reading one database at a time)")
}

// watchStates samples f's tenants' states until the test ends: the most
// relays at once (starting, running, unready or stopping), and how many
// tenants were once seen waiting.
func watchStates(t *testing.T, f *fleet.Fleet) func() (most, waited int) {
	var mu sync.Mutex
	seenWaiting := map[string]bool{}
	var most atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			tenants, _ := f.Status()
			n := 0
			for _, s := range tenants {
				switch s.State {
				case fleet.StateStarting, fleet.StateRunning, fleet.StateUnready, fleet.StateStopping:
					n++
				case fleet.StateWaiting:
					mu.Lock()
					seenWaiting[s.Tenant] = true
					mu.Unlock()
				}
			}
			if int64(n) > most.Load() {
				most.Store(int64(n))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return int(most.Load()), len(seenWaiting)
	}
}

// watchTotalConnections samples the server's connections whose
// application name starts with prefix until the test ends; peak is the
// most seen at once, all names together.
func watchTotalConnections(t *testing.T, db *sql.DB, prefix string) (peak func() int) {
	t.Helper()
	var most atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var n int64
			if db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, $1)`, prefix).Scan(&n) == nil &&
				n > most.Load() {
				most.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() int { return int(most.Load()) }
}
