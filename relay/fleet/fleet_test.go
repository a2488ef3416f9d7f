package fleet_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// patience bounds each wait of these tests: a liveness bound, not a
// speed claim.
const patience = 2 * time.Minute

// tenantDB is a tenant's database: a schema of the test's own.
type tenantDB struct {
	db     *pgtest.DB
	client *testent.Client
}

// newTenantDB is a schema of t's own, with the outbox tables when
// migrated.
func newTenantDB(t *testing.T, migrated bool) *tenantDB {
	t.Helper()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	if migrated {
		pgtest.Migrate(t, client.Schema.Create)
	}
	return &tenantDB{db: db, client: client}
}

// bySchema is the tenant's entry naming its schema apart from the URL.
func (d *tenantDB) bySchema(name string) fleet.Tenant {
	return fleet.Tenant{Name: name, DatabaseURL: pgtest.ServerURL(), Schema: d.db.Schema}
}

// byURL is the tenant's entry whose URL sets the search_path.
func (d *tenantDB) byURL(name string) fleet.Tenant {
	return fleet.Tenant{Name: name, DatabaseURL: d.db.URL}
}

// emit commits n OrderPaid events over aggregates aggregates of the
// tenant, returning their ids in commit order per aggregate.
func (d *tenantDB) emit(t *testing.T, tenant string, n, aggregates int) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	for i := range n {
		agg := fmt.Sprintf("%s-order-%d", tenant, i%aggregates)
		id := uuid.New()
		require.NoError(t, d.client.WithTx(ctx, func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: int64(i), AmountCents: 100}, events.WithEventID(id))
		}))
		out[agg] = append(out[agg], id.String())
	}
	return out
}

func writeFile(t *testing.T, path string, tenants ...fleet.Tenant) {
	t.Helper()
	data, err := json.Marshal(fleet.File{Tenants: tenants})
	require.NoError(t, err)
	writeRaw(t, path, data)
}

// writeRaw replaces the file at path with data.
func writeRaw(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path)) // whole, as an operator's tool would
}

// arrivals is what the broker received on "orders".
type arrivals struct {
	mu           sync.Mutex
	count        map[string]int
	perAggregate map[string][]string
	msgs         map[string]*message.Message
}

func receive(t *testing.T) (*gochannel.GoChannel, *arrivals) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10000, Persistent: true, BlockPublishUntilSubscriberAck: true},
		watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	a := &arrivals{count: map[string]int{}, perAggregate: map[string][]string{}, msgs: map[string]*message.Message{}}
	go func() {
		for msg := range msgs {
			a.mu.Lock()
			a.count[msg.UUID]++
			agg := msg.Metadata.Get(events.MetaAggregateID)
			a.perAggregate[agg] = append(a.perAggregate[agg], msg.UUID)
			a.msgs[msg.UUID] = msg
			a.mu.Unlock()
			msg.Ack()
		}
	}()
	return pubsub, a
}

// waitFor waits until every event of want arrived.
func (a *arrivals) waitFor(t *testing.T, want map[string][]string) {
	t.Helper()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, ids := range want {
			for _, id := range ids {
				if a.count[id] == 0 {
					return false
				}
			}
		}
		return true
	}, patience, 50*time.Millisecond, "every event emitted arrives")
}

// requireExactly checks the events of want arrived once each, in their
// aggregate's order, carrying tenant.
func (a *arrivals) requireExactly(t *testing.T, tenant string, want map[string][]string, ce bool) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for agg, ids := range want {
		require.Equal(t, ids, a.perAggregate[agg], "aggregate %s: each event once, in commit order", agg)
		for _, id := range ids {
			require.Equal(t, 1, a.count[id], "event %s arrived once", id)
			md := a.msgs[id].Metadata
			require.Equal(t, tenant, md.Get(events.MetaTenant), "event %s carries its tenant", id)
			if ce {
				require.Equal(t, tenant, md.Get(relay.MetaCloudEventsTenant), "event %s carries its tenant as a CloudEvents extension", id)
			}
		}
	}
}

// got tells whether event id arrived.
func (a *arrivals) got(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count[id] > 0
}

// runFleet runs a fleet on file until the test ends, and waits for it to
// stop then.
func runFleet(t *testing.T, cfg fleet.Config) *fleet.Fleet {
	t.Helper()
	cfg.Reload = cmpOr(cfg.Reload, 100*time.Millisecond)
	cfg.RetryInterval = cmpOr(cfg.RetryInterval, 100*time.Millisecond)
	cfg.MaxRetryInterval = cmpOr(cfg.MaxRetryInterval, time.Second)
	cfg.Relay.PollInterval = cmpOr(cfg.Relay.PollInterval, 100*time.Millisecond)
	cfg.IdleAfter = cmpOr(cfg.IdleAfter, -1) // parking is park_test.go's
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	f, err := fleet.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return f
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// tenantState is the status of tenant name, and whether the fleet lists it.
func tenantState(f *fleet.Fleet, name string) (fleet.TenantStatus, bool) {
	tenants, _ := f.Status()
	for _, s := range tenants {
		if s.Tenant == name {
			return s, true
		}
	}
	return fleet.TenantStatus{}, false
}

// Three tenants, two by schema and one by URL, in one file: each one's
// events arrive once each, in order per aggregate, carrying its tenant
// in the metadata and as a CloudEvents extension.
func TestFleetRelaysEveryTenant(t *testing.T) {
	t.Parallel()
	dbs := []*tenantDB{newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true)}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, dbs[0].bySchema("acme"), dbs[1].bySchema("globex"), dbs[2].byURL("initech"))
	names := []string{"acme", "globex", "initech"}
	want := make([]map[string][]string, len(dbs))
	for i, d := range dbs {
		want[i] = d.emit(t, names[i], 30, 3) // before the fleet: a backlog
	}
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub,
		CloudEvents: &relay.CloudEvents{Source: "urn:test:fleet"}}})
	for i, d := range dbs {
		more := d.emit(t, names[i], 30, 3) // and while it runs
		for agg, ids := range more {
			want[i][agg] = append(want[i][agg], ids...)
		}
	}
	for i := range dbs {
		got.waitFor(t, want[i])
	}
	time.Sleep(time.Second) // room for a duplicate to show
	for i := range dbs {
		got.requireExactly(t, names[i], want[i], true)
	}
	require.Eventually(t, func() bool {
		tenants, _ := f.Status()
		for _, s := range tenants {
			if s.State != fleet.StateRunning {
				return false
			}
		}
		return len(tenants) == 3
	}, patience, 50*time.Millisecond, "every tenant's relay is reported running")
	tenants, fileErr := f.Status()
	require.Empty(t, fileErr)
	for _, s := range tenants {
		require.Equal(t, fleet.DefaultMaxConnections/3, s.Connections, "tenant %s's share of the budget", s.Tenant)
	}
}

// The fleet follows its file without a restart: an entry added is
// relayed, one whose URL changed is relayed from its new one, and one
// removed is no longer relayed.
func TestFleetFollowsTheFile(t *testing.T) {
	t.Parallel()
	a, b := newTenantDB(t, true), newTenantDB(t, true)
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, a.bySchema("acme"))
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}})

	wantA := a.emit(t, "acme", 10, 2)
	got.waitFor(t, wantA)

	writeFile(t, file, a.bySchema("acme"), b.bySchema("globex"))
	wantB := b.emit(t, "globex", 10, 2)
	got.waitFor(t, wantB)

	writeFile(t, file, a.bySchema("acme"), b.byURL("globex")) // globex's relay restarts on its new URL
	moreB := b.emit(t, "globex", 10, 2)
	got.waitFor(t, moreB)
	for agg, ids := range moreB {
		wantB[agg] = append(wantB[agg], ids...)
	}

	writeRaw(t, file, []byte(`{"tenants": [{"name": "acme"}]}`)) // refused whole
	require.Eventually(t, func() bool { _, fileErr := f.Status(); return fileErr != "" }, patience, 50*time.Millisecond)
	_, fileErr := f.Status()
	require.Contains(t, fileErr, `tenant 1 ("acme"): database_url is empty`)
	stillB := b.emit(t, "globex", 5, 2)
	got.waitFor(t, stillB) // the tenants of the last good file go on
	for agg, ids := range stillB {
		wantB[agg] = append(wantB[agg], ids...)
	}

	writeFile(t, file, b.byURL("globex"))
	require.Eventually(t, func() bool { _, listed := tenantState(f, "acme"); return !listed }, patience, 50*time.Millisecond,
		"acme's relay stops once its entry is gone")
	afterRemoval := a.emit(t, "acme", 5, 1)
	lastB := b.emit(t, "globex", 5, 1)
	got.waitFor(t, lastB) // the fleet runs on
	for agg, ids := range lastB {
		wantB[agg] = append(wantB[agg], ids...)
	}
	time.Sleep(2 * time.Second) // twenty polls of a relay that would still run
	for _, id := range afterRemoval["acme-order-0"] {
		require.False(t, got.got(id), "event %s of a removed tenant was relayed", id)
	}
	var undelivered int
	require.NoError(t, a.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE delivered_at IS NULL`).Scan(&undelivered))
	require.Equal(t, 5, undelivered, "the removed tenant's new rows wait in its outbox")

	got.requireExactly(t, "acme", wantA, false)
	got.requireExactly(t, "globex", wantB, false)
}

// A tenant whose schema lacks the outbox tables, and one whose database
// cannot be reached, are reported for themselves (Status, and an error
// logged with the tenant's name) while the others' events all arrive; the
// first recovers once its tables exist, without a restart.
func TestFleetIsolatesFailingTenants(t *testing.T) {
	t.Parallel()
	good, bare := newTenantDB(t, true), newTenantDB(t, false)
	unreachable := fleet.Tenant{Name: "down", DatabaseURL: "postgres://postgres@127.0.0.1:1/test?connect_timeout=5"}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, bare.bySchema("bare"), unreachable, good.bySchema("acme")) // the failing ones first
	pubsub, got := receive(t)
	logs := &errorLog{mu: &sync.Mutex{}, lines: &[]watermill.LogFields{}}
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, Logger: logs})

	wantGood := good.emit(t, "acme", 20, 2)
	got.waitFor(t, wantGood)
	got.requireExactly(t, "acme", wantGood, false)

	for _, name := range []string{"bare", "down"} {
		require.Eventually(t, func() bool {
			s, _ := tenantState(f, name)
			return s.State == fleet.StateFailed && s.Failures >= 2 // retried
		}, patience, 50*time.Millisecond, "tenant %s is reported failed, and retried", name)
	}
	s, _ := tenantState(f, "bare")
	require.Contains(t, s.LastError, "outbox_events", "bare's error names the missing table")
	s, _ = tenantState(f, "down")
	require.Contains(t, s.LastError, "not reachable", "down's error says its database cannot be reached")
	require.Eventually(t, func() bool { s, _ := tenantState(f, "acme"); return s.State == fleet.StateRunning }, patience, 50*time.Millisecond)
	require.True(t, loggedFailure(logs, "bare"), "the failure is logged with the tenant's name")
	require.True(t, loggedFailure(logs, "down"), "the failure is logged with the tenant's name")

	pgtest.Migrate(t, bare.client.Schema.Create) // the operator fixes bare
	wantBare := bare.emit(t, "bare", 10, 2)
	got.waitFor(t, wantBare)
	got.requireExactly(t, "bare", wantBare, false)
	require.Eventually(t, func() bool { s, _ := tenantState(f, "bare"); return s.State == fleet.StateRunning }, patience, 50*time.Millisecond)
}

// errorLog keeps the errors logged, with their fields.
type errorLog struct {
	watermill.NopLogger
	fields watermill.LogFields
	mu     *sync.Mutex
	lines  *[]watermill.LogFields // each error's fields, its message under "msg"
}

func (l *errorLog) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &errorLog{fields: l.fields.Copy().Add(fields), mu: l.mu, lines: l.lines}
}

func (l *errorLog) Error(msg string, _ error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, l.fields.Copy().Add(fields).Add(watermill.LogFields{"msg": msg}))
}

// loggedFailure tells whether a failure of tenant's relay was logged
// with its name.
func loggedFailure(logs *errorLog, tenant string) bool {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, fields := range *logs.lines {
		if fields["tenant"] == tenant && strings.HasPrefix(fields["msg"].(string), "Tenant's relay failed") {
			return true
		}
	}
	return false
}

// Each tenant's pool is bounded to its share of the budget, shared anew
// when a tenant comes (the running pools shrink at once), and the server
// never sees more of a tenant's connections than that; the events still
// all arrive. Below the floor a relay needs, the floor wins.
func TestFleetKeepsToTheBudget(t *testing.T) {
	t.Parallel()
	dbs := []*tenantDB{newTenantDB(t, true), newTenantDB(t, true), newTenantDB(t, true)}
	names := []string{"acme", "globex", "initech"}
	app := "fleet_budget_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	entries := make([]fleet.Tenant, len(dbs))
	for i, d := range dbs {
		entries[i] = d.bySchema(names[i])
		entries[i].DatabaseURL = withParam(t, entries[i].DatabaseURL, "application_name", app+"_"+names[i])
	}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, entries[:2]...)
	want := make([]map[string][]string, len(dbs))
	for i, d := range dbs {
		want[i] = d.emit(t, names[i], 200, 10)
	}
	peak := watchConnections(t, dbs[0].db.DB, app)
	pubsub, got := receive(t)
	pools := &openedPools{byApp: map[string]*sql.DB{}}
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub}, MaxConnections: 20, Open: pools.open})
	requireBounds := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			tenants, _ := f.Status()
			for _, s := range tenants {
				db := pools.get(app + "_" + s.Tenant)
				if s.Connections != 20/n || db == nil || db.Stats().MaxOpenConnections != 20/n {
					return false
				}
			}
			return len(tenants) == n
		}, patience, 10*time.Millisecond, "each of %d tenants' pools is bounded to %d", n, 20/n)
	}
	requireBounds(2)
	writeFile(t, file, entries...)
	requireBounds(3)
	for i := range dbs {
		got.waitFor(t, want[i])
		got.requireExactly(t, names[i], want[i], false)
	}
	for _, name := range names {
		n := peak(app + "_" + name)
		t.Logf("tenant %s: at most %d connections seen", name, n)
		require.Positive(t, n)
		require.LessOrEqual(t, n, 20/2, "tenant %s's connections on the server", name)
	}
	require.Equal(t, fleet.MinConnectionsPolling, fleet.ConnectionsPerTenant(20, 200, false))
	require.Equal(t, fleet.MinConnectionsListening, fleet.ConnectionsPerTenant(20, 200, true))
}

// openedPools is the pool the fleet opened last for each application
// name.
type openedPools struct {
	mu    sync.Mutex
	byApp map[string]*sql.DB
}

func (p *openedPools) open(databaseURL string) (*sql.DB, error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.byApp[u.Query().Get("application_name")] = db
	p.mu.Unlock()
	return db, nil
}

func (p *openedPools) get(app string) *sql.DB {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byApp[app]
}

// watchConnections counts the server's connections of each application
// name starting with prefix until the test ends; peak tells the most seen
// at once of one name.
func watchConnections(t *testing.T, db *sql.DB, prefix string) (peak func(name string) int) {
	t.Helper()
	var mu sync.Mutex
	most := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rows, err := db.QueryContext(ctx, `SELECT application_name, count(*) FROM pg_stat_activity
				WHERE starts_with(application_name, $1) GROUP BY 1`, prefix)
			if err == nil {
				for rows.Next() {
					var name string
					var n int
					if rows.Scan(&name, &n) == nil {
						mu.Lock()
						most[name] = max(most[name], n)
						mu.Unlock()
					}
				}
				rows.Close()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return most[name]
	}
}

func withParam(t *testing.T, rawURL, key, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// A tenant removed from the file stops gracefully: by the time the fleet
// no longer lists it, every publish the broker took is recorded as
// delivered, none left to be sent again.
func TestFleetStopsARemovedTenantGracefully(t *testing.T) {
	t.Parallel()
	a := newTenantDB(t, true)
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, a.bySchema("acme"))
	pubsub, _ := receive(t)
	slow := &slowPublisher{Publisher: pubsub, delay: 300 * time.Millisecond, started: make(chan struct{}, 100)}
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: slow}})
	a.emit(t, "acme", 20, 20) // 20 aggregates: many publishes in flight at once
	select {
	case <-slow.started:
	case <-time.After(patience):
		t.Fatal("no publish started")
	}
	writeFile(t, file) // no tenant: acme's relay stops while publishes are in flight
	require.Eventually(t, func() bool { _, listed := tenantState(f, "acme"); return !listed }, patience, time.Millisecond)
	published := slow.done()
	require.NotEmpty(t, published)
	rows, err := a.db.DB.Query(`SELECT event_id::text FROM outbox_events WHERE delivered_at IS NOT NULL`)
	require.NoError(t, err)
	defer rows.Close()
	recorded := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		recorded[id] = true
	}
	require.NoError(t, rows.Err())
	require.Equal(t, published, recorded, "every publish the broker took is recorded as delivered once the tenant stopped")
}

// slowPublisher takes delay over each publish, and tells the ids it
// published.
type slowPublisher struct {
	message.Publisher
	delay   time.Duration
	started chan struct{}
	mu      sync.Mutex
	ids     map[string]bool
}

func (p *slowPublisher) Publish(topic string, msgs ...*message.Message) error {
	select {
	case p.started <- struct{}{}:
	default:
	}
	time.Sleep(p.delay)
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil {
		p.ids = map[string]bool{}
	}
	for _, m := range msgs {
		p.ids[m.UUID] = true
	}
	return nil
}

func (p *slowPublisher) done() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for id := range p.ids {
		out[id] = true
	}
	return out
}

// ParseFile refuses a file the fleet cannot use, naming the entry.
func TestParseFileRefusals(t *testing.T) {
	for file, want := range map[string]string{
		`{"tenants": [{"name": "a", "database_url": "postgres://h/d"}, {"name": "a", "database_url": "postgres://h/e"}]}`: `tenant 2 ("a"): the name is also tenant 1's`,
		`{"tenants": [{"name": "a b", "database_url": "postgres://h/d"}]}`:                                                `tenant 1 ("a b"): tenant "a b": character ' ' at byte 1`,
		`{"tenants": [{"name": "a", "database_url": "mysql://h/d"}]}`:                                                     `database_url has scheme "mysql"`,
		`{"tenants": [{"name": "a", "database_url": "postgres://h/d", "schema": "Acme"}]}`:                                `schema "Acme"`,
		`{"tenants": [{"name": "a", "url": "postgres://h/d"}]}`:                                                           `unknown field "url"`,
		`[]`: `not a databases file`,
	} {
		_, err := fleet.ParseFile([]byte(file))
		require.ErrorContains(t, err, want, file)
	}
	tenants, err := fleet.ParseFile([]byte(`{"tenants": [{"name": "a", "database_url": "host=h dbname=d", "schema": "tenant_a"}]}`))
	require.NoError(t, err)
	require.Equal(t, []fleet.Tenant{{Name: "a", DatabaseURL: "host=h dbname=d", Schema: "tenant_a"}}, tenants)
}

// On the compatible path too, each tenant's events arrive once each, in
// order, carrying its tenant, with the pools at the floor of a relay that
// listens.
func TestFleetOnTheCompatiblePath(t *testing.T) {
	t.Parallel()
	dbs := []*tenantDB{newTenantDB(t, true), newTenantDB(t, true)}
	names := []string{"acme", "globex"}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, dbs[0].bySchema(names[0]), dbs[1].byURL(names[1]))
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub, Path: relay.PathCompatible}, MaxConnections: 1})
	for i, d := range dbs {
		want := d.emit(t, names[i], 30, 3)
		got.waitFor(t, want)
		got.requireExactly(t, names[i], want, false)
	}
	tenants, _ := f.Status()
	for _, s := range tenants {
		require.Equal(t, fleet.MinConnectionsListening, s.Connections, "tenant %s", s.Tenant)
	}
}

// With Listen, each tenant's relay listens (fast path, not poll-only) in
// a pool at the floor of a relay that listens, and relays as well.
func TestFleetListening(t *testing.T) {
	t.Parallel()
	d := newTenantDB(t, true)
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, d.bySchema("acme"))
	pubsub, got := receive(t)
	f := runFleet(t, fleet.Config{File: file, Relay: relay.Config{Publisher: pubsub, PollInterval: 10 * time.Minute}, Listen: true, MaxConnections: 1})
	require.Eventually(t, func() bool { s, _ := tenantState(f, "acme"); return s.State == fleet.StateRunning }, patience, 10*time.Millisecond)
	want := d.emit(t, "acme", 30, 3) // woken by notifications: the poll interval is ten minutes
	got.waitFor(t, want)
	got.requireExactly(t, "acme", want, false)
	s, _ := tenantState(f, "acme")
	require.Equal(t, fleet.MinConnectionsListening, s.Connections)
}
