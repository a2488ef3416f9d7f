package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/relay"
)

// Relay processes killed with SIGKILL and restarted again and again while
// scheduled events fall due, two at a time where the path runs replicas:
// none lost, none early by the database's clock, each promoted once (its
// aggregate numbered densely, once per event), duplicates at the broker
// within the batches in flight at the kills, first arrivals of each
// aggregate in its order.
func TestScheduledEventsSurviveKilledRelays(t *testing.T) {
	skipIfShort(t, "kills relay processes")
	t.Parallel()
	forPaths(t, testScheduledEventsSurviveKilledRelays)
}

func testScheduledEventsSurviveKilledRelays(t *testing.T, p *onPath) {
	bin, err := buildCommand()
	require.NoError(t, err)
	// Redis Streams keeps every publish: duplicates show.
	const brokerURL = "redis://127.0.0.1:6379/0"
	direct := openBroker(t, brokerURL, "Redis at 127.0.0.1:6379")
	prefix := uniquePrefix()
	got := receiveTimed(t, direct, p.db.DB, prefix)

	const batch = 20
	start := func() (*exec.Cmd, *lockedBuffer) {
		cmd := exec.Command(bin, append(p.relayArgs(), "--broker", brokerURL, "--topic-prefix", prefix,
			"--batch-size", fmt.Sprint(batch), "--log-level", "info")...)
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+p.db.URL)
		logs := &lockedBuffer{}
		cmd.Stderr = logs
		startDyingWithTest(t, cmd)
		return cmd, logs
	}
	replicas := 2
	if p.path == relay.PathCompatible {
		replicas = 1 // its forwarders share no work
	}
	running := make([]*exec.Cmd, replicas)
	for i := range running {
		running[i], _ = start()
	}

	// Scheduled events due over the next few seconds, among immediate ones.
	var scheduled, all []string
	for i := range 200 {
		agg := fmt.Sprintf("kill-%d", i%10)
		id := emitOne(t, p.client, agg, events.DeliverAfter(time.Second+time.Duration(i)*15*time.Millisecond))
		scheduled = append(scheduled, id)
		all = append(all, id)
		if i%2 == 0 {
			all = append(all, emitOne(t, p.client, agg))
		}
	}
	var last time.Time
	require.NoError(t, p.db.DB.QueryRow(`SELECT max(deliver_at) FROM outbox_scheduled_events`).Scan(&last))

	// Kill one relay every few hundred milliseconds until the last is
	// well past due, and start it again.
	kills := 0
	for kills < 4 || dbNow(t, p.db.DB).Before(last.Add(time.Second)) {
		time.Sleep(time.Duration(200+rand.IntN(300)) * time.Millisecond)
		i := rand.IntN(replicas)
		require.NoError(t, running[i].Process.Signal(syscall.SIGKILL))
		_ = running[i].Wait()
		kills++
		running[i], _ = start()
	}
	got.waitFor(t, all, patience)
	for _, cmd := range running {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	final, logs := start()
	waitDelivered(t, p.emitBundle, 0)
	stopGracefully(t, final, logs)

	byID, perAgg := got.first()
	t.Logf("latest arrival %s after its due time", requireNeverEarly(t, byID, scheduled, 0))
	dups := len(got.all) - len(byID)
	t.Logf("%d events (%d scheduled), %d kills, %d duplicates", len(all), len(scheduled), kills, dups)
	require.Len(t, byID, len(all), "events arrived that were not emitted")
	require.LessOrEqual(t, dups, kills*batch, "duplicates beyond the batches in flight at the kills")
	requireDenseSeqs(t, p.db.DB, len(all))
	for agg, ids := range perAgg {
		for i, id := range ids {
			require.EqualValues(t, i+1, byID[id].seq, "aggregate %s: first arrivals in its order", agg)
		}
	}
}

// requireDenseSeqs checks the outbox holds n rows, each aggregate
// numbered 1, 2, 3... in id order: every event numbered once.
func requireDenseSeqs(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	var rows, wrong int
	require.NoError(t, db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE aggregate_seq IS DISTINCT FROM rn) FROM
		(SELECT aggregate_seq, row_number() OVER (PARTITION BY aggregate_id ORDER BY id) AS rn FROM outbox_events) o`).
		Scan(&rows, &wrong))
	require.Equal(t, n, rows)
	require.Zero(t, wrong, "aggregates not numbered 1, 2, 3... in id order")
}

// Two relays (of their own connection pools, as two processes) promote
// the same scheduled events, in small batches, all due at once: one
// promotion at a time (the advisory lock), so each aggregate's events take
// their numbers in commit order, each once.
func TestTwoRelaysPromoteEachEventOnceInOrder(t *testing.T) {
	t.Parallel()
	p := setupPath(t, relay.PathFast)
	pubsub, got := receiveInProcess(t, "orders")

	due := dbNow(t, p.db.DB).Add(2 * time.Second)
	const n = 300
	perAgg := map[string][]string{}
	for i := range n {
		agg := fmt.Sprintf("two-%d", i%2)
		perAgg[agg] = append(perAgg[agg], emitOne(t, p.client, agg, events.DeliverAt(due)))
	}
	for range 2 {
		db, err := pgschema.Open(p.db.URL)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		r, err := relay.New(p.config(relay.Config{DB: db, Publisher: pubsub, Logger: watermill.NopLogger{}}))
		require.NoError(t, err)
		relay.SetPromoteBatch(r, 3)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	want := emitted{ids: map[string]bool{}, perAggregate: perAgg}
	for _, ids := range perAgg {
		for _, id := range ids {
			want.ids[id] = true
		}
	}
	got.waitFor(t, want, patience)
	requireDenseSeqs(t, p.db.DB, n)
	seq := map[string]int64{}
	rows, err := p.db.DB.Query(`SELECT event_id::text, aggregate_seq FROM outbox_events`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		var s int64
		require.NoError(t, rows.Scan(&id, &s))
		seq[id] = s
	}
	require.NoError(t, rows.Err())
	for agg, ids := range perAgg {
		for i, id := range ids {
			require.EqualValues(t, i+1, seq[id], "aggregate %s: event %d of its commit order", agg, i)
		}
	}
}
