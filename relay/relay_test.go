package relay_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// quick makes a relay of the given path react fast enough for tests.
func quick(path relay.Path, cfg relay.Config) relay.Config {
	cfg.Path = path
	cfg.RetryInterval = 50 * time.Millisecond
	if path != relay.PathWAL { // it streams
		cfg.PollInterval = 20 * time.Millisecond
	}
	return cfg
}

// paths is every read path: the shared tests run on each.
var paths = []relay.Path{relay.PathFast, relay.PathCompatible, relay.PathWAL}

// everyDatabase is every read path, the poll path on SQLite and on
// MariaDB, and the compatible path on MariaDB: the guarantee tests
// (delivery, order, kills, broken rows, dead letters) run on each, from
// the same code.
var everyDatabase = append(slices.Clone(paths), fastLogged, relay.PathPoll, pollMariaDB, compatibleMariaDB)

// pollMariaDB names the poll path on MariaDB (relay.PathPoll names it on
// SQLite) for setupPath, and compatibleMariaDB the compatible path there.
const (
	pollMariaDB       relay.Path = "poll-mariadb"
	compatibleMariaDB relay.Path = "compatible-mariadb"
	// fastLogged is the fast path keeping a delivered log
	// (FastConfig.DeliveredLog), its floor moved every 100 ms.
	fastLogged relay.Path = "fast-logged"
)

// onPath is a shared test's run on one read path: an outbox of its own
// and, on the WAL path, a slot and a publication of their own, the slot
// created before the test writes anything (the WAL path delivers what
// commits after its slot's start, as a new relay does).
type onPath struct {
	path relay.Path
	*emitBundle
	wal *walSetup // nil off the WAL path
	// logged is the fast path keeping a delivered log (fastLogged).
	logged bool
}

// forPaths runs a test once on each read path.
func forPaths(t *testing.T, test func(t *testing.T, p *onPath)) {
	forPathsOf(t, paths, test)
}

// forPathsOf runs a test once on each of the given read paths: a test of
// what only some of them do.
func forPathsOf(t *testing.T, of []relay.Path, test func(t *testing.T, p *onPath)) {
	for _, path := range of {
		t.Run(string(path), func(t *testing.T) {
			t.Parallel()
			test(t, setupPath(t, path))
		})
	}
}

func setupPath(t *testing.T, path relay.Path) *onPath {
	t.Helper()
	switch path {
	case relay.PathPoll: // SQLite's
		return &onPath{path: path, emitBundle: setupEmitSQLite(t)}
	case pollMariaDB:
		return &onPath{path: relay.PathPoll, emitBundle: setupEmitMySQL(t)}
	case compatibleMariaDB:
		return &onPath{path: relay.PathCompatible, emitBundle: setupEmitMySQL(t)}
	case fastLogged:
		return &onPath{path: relay.PathFast, emitBundle: setupEmit(t), logged: true}
	case relay.PathWAL:
	default:
		return &onPath{path: path, emitBundle: setupEmit(t)}
	}
	s := setupWAL(t)
	s.createSlot(t)
	return &onPath{path: path, emitBundle: s.emitBundle, wal: s}
}

// config is cfg made a quick relay of p's path on p's outbox (cfg.DB, when
// set, is kept).
func (p *onPath) config(cfg relay.Config) relay.Config {
	db := cfg.DB
	if p.wal != nil {
		cfg = p.wal.config(cfg)
	}
	cfg.DB = cmp.Or(db, p.sql)
	cfg.Fast.DeliveredLog = p.logged
	return quick(p.path, cfg)
}

// relayArgs is the command line of a quick `entoutbox relay` of p's path
// on p's outbox, before the broker's flags.
func (p *onPath) relayArgs() []string {
	args := []string{"relay", "--path", string(p.path), "--retry-interval", "50ms"}
	switch p.path {
	case relay.PathWAL:
		return append(args, "--slot", p.wal.slot, "--publication", p.wal.publication)
	case relay.PathFast:
		args = append(args, "--lease", "2s")
		if p.logged {
			args = append(args, "--delivered-log")
		}
	}
	return append(args, "--poll-interval", "20ms")
}

func TestRelayInProcess(t *testing.T) {
	t.Parallel()
	forPathsOf(t, everyDatabase, testRelayInProcess)
}

func testRelayInProcess(t *testing.T, p *onPath) {
	pubsub, got := receiveInProcess(t, "orders")

	want := emitOrders(t, p.client, 120, 7, 5)
	stop := runRelay(t, p.config(relay.Config{Publisher: pubsub}))
	got.waitFor(t, want, patience)
	waitDelivered(t, p.emitBundle, 0)
	require.NoError(t, stop(), "a shutdown asked for by ctx is not an error")
	got.requireExactly(t, want)

	// Metadata: event id as message UUID, name, version, aggregate, headers.
	for id := range want.ids {
		msg := got.msgs[id]
		require.Equal(t, "order.paid", msg.Metadata.Get(events.MetaEventName))
		require.Equal(t, "2", msg.Metadata.Get(events.MetaEventVersion))
		require.Equal(t, "Order", msg.Metadata.Get(events.MetaAggregateType))
		require.NotEmpty(t, msg.Metadata.Get("correlation_id"))
		require.Empty(t, msg.Metadata.Get(relay.MetaRowID), "the envelope's row id does not leak")
		require.Empty(t, msg.Metadata.Get(relay.MetaTopic), "the subscriber's topic does not leak")
		requirePayload(t, msg)
	}

}

func TestRelaySetsAsideBrokenRows(t *testing.T) {
	t.Parallel()
	forPathsOf(t, everyDatabase, testRelaySetsAsideBrokenRows)
}

func testRelaySetsAsideBrokenRows(t *testing.T, p *onPath) {
	b := p.emitBundle
	pubsub, got := receiveInProcess(t, "orders")

	before := emitOrders(t, b.client, 5, 2, 0)
	// Rows written by hand that no broker can take.
	_, err := b.sql.Exec(b.rebind(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers) VALUES
		($1, 'order.paid', 2, 'orders', 'Order', 'order-x', '{"order_id": 1}', '{"attempt": 3}'),
		($2, 'order.paid', 2, '', 'Order', 'order-y', '{"order_id": 2}', NULL)`), uuid.NewString(), uuid.NewString())
	require.NoError(t, err)
	after := emitOrders(t, b.client, 5, 2, 0)

	runRelay(t, p.config(relay.Config{Publisher: pubsub}))
	got.waitFor(t, before, patience)
	got.waitFor(t, after, patience)
	require.Equal(t, 10, got.distinct(), "the broken rows are not published")
	// The compatible path writes the dead letters in the transaction of
	// their batch, which commits when the batch is acked, possibly after
	// the later rows were published: wait for the set-aside rows to have
	// left the outbox for the dead letters.
	waitDelivered(t, b, 2)

	payloadText := "convert_from(payload, 'UTF8')"
	switch {
	case b.mysql:
		payloadText = "CAST(payload AS CHAR)"
	case b.db == nil:
		payloadText = "CAST(payload AS TEXT)" // SQLite
	}
	rows, err := b.sql.Query(`SELECT aggregate_id, source, reason, ` + payloadText + ` FROM outbox_dead_letters ORDER BY aggregate_id`)
	require.NoError(t, err)
	defer rows.Close()
	var dead [][4]string
	for rows.Next() {
		var r [4]string
		require.NoError(t, rows.Scan(&r[0], &r[1], &r[2], &r[3]))
		dead = append(dead, r)
	}
	require.Len(t, dead, 2)
	require.Equal(t, "order-x", dead[0][0])
	require.Equal(t, "relay", dead[0][1])
	require.Contains(t, dead[0][2], "outbox: headers are not a JSON object of strings")
	require.JSONEq(t, `{"order_id": 1}`, dead[0][3])
	require.Equal(t, "order-y", dead[1][0])
	require.Equal(t, "topic is empty", dead[1][2])
	var left int
	require.NoError(t, b.sql.QueryRow(`SELECT count(*) FROM outbox_events WHERE aggregate_id IN ('order-x', 'order-y')`).Scan(&left))
	require.Zero(t, left, "a dead-lettered row is moved out of the outbox")
}

// With DeleteDelivered, a delivered row is deleted instead of stamped: the
// outbox ends empty, and every event arrived once, in order.
func TestRelayDeleteDeliveredRemovesDeliveredRows(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")

	want := emitOrders(t, b.client, 120, 7, 5)
	rowCount := func() (n int) {
		require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&n))
		return n
	}
	require.Equal(t, len(want.ids), rowCount())

	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub,
		Fast: relay.FastConfig{Delete: true}}))
	got.waitFor(t, want, patience)
	require.Eventually(t, func() bool { return rowCount() == 0 }, patience, 20*time.Millisecond,
		"delivered rows are left in the outbox")
	require.NoError(t, stop())
	got.requireExactly(t, want)
}

// A transaction that took its row id early and commits after later rows
// were delivered is relayed too: the fast path reads below its cursor again
// now and then. (The compatible path does not deliver the later rows before
// the open transaction ends: it reads in commit order.)
func TestRelayDeliversALateCommit(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub}))

	late, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer late.Rollback()
	lateID := uuid.New()
	require.NoError(t, late.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 1, AmountCents: 1},
		events.WithEventID(lateID))) // written now: its row id is taken
	early := emitOrdersAs(t, b.client, "early", 20, 4, 0)
	got.waitFor(t, early, patience)

	require.NoError(t, late.Commit())
	early.ids[lateID.String()] = true
	early.perAggregate["late"] = []string{lateID.String()}
	got.waitFor(t, early, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	got.requireExactly(t, early)
}

// New refuses a setting that cannot work (a lease or a partition count
// the fast path cannot work with, a negative size or interval), naming the
// field, instead of starting and failing later.
func TestNewRefusesBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	_, err := relay.New(relay.Config{DB: b.db.DB, Publisher: pub,
		Fast: relay.FastConfig{Lease: 500 * time.Millisecond}})
	require.EqualError(t, err, "relay: Config.Fast.Lease must be at least 1s, not 500ms")
	_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub,
		Fast: relay.FastConfig{Partitions: 5000}})
	require.EqualError(t, err, "relay: Config.Fast.Partitions must be between 1 and 4096, not 5000")
	_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub,
		Fast: relay.FastConfig{Partitions: -1}})
	require.EqualError(t, err, "relay: Config.Fast.Partitions must be between 1 and 4096, not -1")
	for _, c := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{Path: "slow"}, `relay: Config.Path is "slow"; want "fast", "compatible", "wal" or "poll"`},
		{relay.Config{CloseTimeout: -time.Second}, "relay: Config.CloseTimeout must not be negative, not -1s"},
		{relay.Config{ScheduledTable: strings.Repeat("s", 64)}, `relay: Config.ScheduledTable "` + strings.Repeat("s", 64) +
			`" is 64 bytes, at most 63 (PostgreSQL identifiers hold 63 bytes)`},
		{relay.Config{SequenceTable: strings.Repeat("q", 64)}, `relay: Config.SequenceTable "` + strings.Repeat("q", 64) +
			`" is 64 bytes, at most 63 (PostgreSQL identifiers hold 63 bytes)`},
	} {
		c.cfg.DB, c.cfg.Publisher = b.db.DB, pub
		_, err := relay.New(c.cfg)
		require.EqualError(t, err, c.want)
	}
	_, err = relay.New(relay.Config{Publisher: pub})
	require.EqualError(t, err, "relay: Config.DB is nil")
	_, err = relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{BatchSize: -1})
	require.EqualError(t, err, "relay: SubscriberConfig.BatchSize must not be negative, not -1")
	_, err = relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{ScheduledTable: strings.Repeat("s", 64)})
	require.EqualError(t, err, `relay: SubscriberConfig.ScheduledTable "`+strings.Repeat("s", 64)+
		`" is 64 bytes, at most 63 (PostgreSQL identifiers hold 63 bytes)`)
}
