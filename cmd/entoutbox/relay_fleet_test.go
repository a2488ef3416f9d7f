package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// --databases-file runs one relay per tenant database; a flag of one
// database (--database-url among them, from the command line or
// ENTOUTBOX_DATABASE_URL) or a path the fleet does not run is refused with
// it before anything is opened, and its own flag without it.
func TestRelayDatabasesFileRefusals(t *testing.T) {
	file := filepath.Join(t.TempDir(), "databases.json")
	_, err := run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--database-url", "postgres://127.0.0.1/app")
	require.EqualError(t, err, "--database-url cannot go with --databases-file: the databases are the file's; drop it")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--metrics-tenants", "0")
	require.EqualError(t, err, "--metrics-tenants 0: at least 1 tenant keeps its label")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--database-url", "postgres://127.0.0.1/app", "--metrics-tenants", "5")
	require.EqualError(t, err, "--metrics-tenants applies to the metrics of --databases-file's tenants")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--path", "wal")
	require.EqualError(t, err, "--path wal cannot go with --databases-file: the fleet runs the fast or the compatible path")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--fleet-listen")
	require.EqualError(t, err, "--fleet-listen applies to the relays of --databases-file")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--fleet-idle-after", "1m")
	require.EqualError(t, err, "--fleet-idle-after applies to the relays of --databases-file")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--fleet-idle-after", "-1s")
	require.EqualError(t, err, "--fleet-idle-after -1s: a duration, or 0 to never park a tenant")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--fleet-database-url", "postgres://127.0.0.1/fleet")
	require.EqualError(t, err, "--fleet-database-url applies to the processes of a fleet of --databases-file")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--fleet-member-id", "a")
	require.EqualError(t, err, "--fleet-member-id and --fleet-member-timeout name this process among those of --fleet-database-url")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--fleet-database-url", "mysql://root@127.0.0.1/fleet")
	require.EqualError(t, err, "--fleet-database-url: the fleet's members are kept in a PostgreSQL database; give a postgres:// URL")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--fleet-database-url", "postgres://127.0.0.1/fleet",
		"--fleet-member-timeout", "0s")
	require.EqualError(t, err, "--fleet-member-timeout 0s: a positive duration")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--fleet-backlog-interval", "1m")
	require.EqualError(t, err, "--fleet-backlog-interval applies to the metrics of --databases-file's tenants")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--databases-file", file, "--fleet-backlog-interval", "0s")
	require.EqualError(t, err, "--fleet-backlog-interval 0s: a positive duration")
	_, err = run(t, map[string]string{"ENTOUTBOX_DATABASE_URL": "postgres://127.0.0.1/app"}, "relay", "--broker", "mem://", "--databases-file", file)
	require.EqualError(t, err, "ENTOUTBOX_DATABASE_URL (--database-url) cannot go with --databases-file: the databases are the file's; drop it")
}

// The command relays the tenants of its file to the broker, each event
// carrying its tenant, and stops cleanly.
func TestRelayDatabasesFile(t *testing.T) {
	requireNATS(t)
	acme, globex := outboxDB(t), outboxDB(t)
	file := filepath.Join(t.TempDir(), "databases.json")
	data, err := json.Marshal(fleet.File{Tenants: []fleet.Tenant{
		{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acme.Schema}, {Name: "globex", DatabaseURL: globex.URL}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))
	want := map[string]string{} // event id: tenant
	for tenant, db := range map[string]*pgtest.DB{"acme": acme, "globex": globex} {
		id := uuid.NewString()
		_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at)
			VALUES ($1, 'order.paid', 2, 'orders', 'Order', '1', '{}', now())`, id)
		require.NoError(t, err)
		want[id] = tenant
	}
	prefix := "fleet_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "_"
	got := receiveTenants(t, prefix)

	logs, stop := runInBackground("relay", "--databases-file", file, "--broker", "nats://"+testNATS, "--topic-prefix", prefix)
	defer stop() //nolint:errcheck // stopped below, this is for a failed test
	require.Eventually(t, func() bool { return len(got.snapshot()) == len(want) }, patience, 50*time.Millisecond,
		"every tenant's event arrives; logs:\n%s", logs)
	require.Equal(t, want, got.snapshot(), "each event carries its tenant")
	require.NoError(t, stop())
	require.Contains(t, logs.String(), "Relay fleet stopped")
}

// runInBackground runs the command in this process with args until
// stop, which returns its error; logs is what it wrote.
func runInBackground(args ...string) (logs *syncBuffer, stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(logs)
		cmd.SetErr(logs)
		cmd.SetArgs(args)
		done <- cmd.ExecuteContext(ctx)
	}()
	var err error
	var once sync.Once
	return logs, func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
}

// tenantsSeen is the tenant of each event received.
type tenantsSeen struct {
	mu      sync.Mutex
	tenants map[string]string
}

func (s *tenantsSeen) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.tenants {
		out[k] = v
	}
	return out
}

// receiveTenants records the tenant of every event on prefix+"orders" on
// the test's NATS, until the test ends.
func receiveTenants(t *testing.T, prefix string) *tenantsSeen {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b, err := broker.Open(ctx, "nats://"+testNATS, broker.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	sub, err := b.Subscriber(prefix + "consumer")
	require.NoError(t, err)
	msgs, err := sub.Subscribe(ctx, prefix+"orders")
	require.NoError(t, err)
	seen := &tenantsSeen{tenants: map[string]string{}}
	go func() {
		for msg := range msgs {
			record(seen, msg)
		}
	}()
	return seen
}

func record(s *tenantsSeen, msg *message.Message) {
	s.mu.Lock()
	s.tenants[msg.UUID] = msg.Metadata.Get(events.MetaTenant)
	s.mu.Unlock()
	msg.Ack()
}

// With --metrics-addr the fleet serves its tenants' metrics: the relay's
// counters labelled by tenant, the first --metrics-tenants by name under
// their own and the others summed under _other, and each tenant's state.
func TestRelayDatabasesFileMetrics(t *testing.T) {
	acme, globex, initech := outboxDB(t), outboxDB(t), outboxDB(t)
	file := filepath.Join(t.TempDir(), "databases.json")
	data, err := json.Marshal(fleet.File{Tenants: []fleet.Tenant{
		{Name: "initech", DatabaseURL: pgtest.ServerURL(), Schema: initech.Schema},
		{Name: "globex", DatabaseURL: pgtest.ServerURL(), Schema: globex.Schema},
		{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acme.Schema}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))
	for _, db := range []*pgtest.DB{acme, globex, initech} {
		_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at)
			VALUES ($1, 'order.paid', 2, 'orders', 'Order', '1', '{}', now())`, uuid.NewString())
		require.NoError(t, err)
	}
	r := startRelay(t, "relay", "--databases-file", file, "--broker", "mem://", "--metrics-addr", "127.0.0.1:0",
		"--metrics-tenants", "1", "--poll-interval", "100ms", "--log-format", "json", "--fleet-backlog-interval", "100ms")
	addr := r.opsAddr(t)
	var body string
	require.Eventually(t, func() bool {
		_, body = get(t, addr, "/metrics")
		return strings.Contains(body, `entoutbox_relay_published_total{result="ok",tenant="acme",topic="orders"} 1`+"\n") &&
			strings.Contains(body, `entoutbox_relay_published_total{result="ok",tenant="_other",topic="orders"} 2`+"\n") &&
			strings.Contains(body, `entoutbox_fleet_tenant_up{tenant="_other"} 2`+"\n")
	}, patience, 100*time.Millisecond, "acme counts under its name, globex and initech under _other")
	require.Contains(t, body, `entoutbox_fleet_tenant_up{tenant="acme"} 1`+"\n")
	require.Eventually(t, func() bool {
		_, body = get(t, addr, "/metrics")
		return strings.Contains(body, `entoutbox_fleet_tenant_pending_events{tenant="acme"} 0`+"\n") &&
			strings.Contains(body, `entoutbox_fleet_tenant_pending_events{tenant="_other"} 0`+"\n") &&
			strings.Contains(body, `entoutbox_fleet_tenant_backlog_unread{tenant="_other"} 0`+"\n")
	}, patience, 100*time.Millisecond, "the tenants' backlog, read and relayed")
	require.Contains(t, body, `entoutbox_fleet_tenant_dead_letters{tenant="acme"} 0`+"\n")
	require.NotContains(t, body, `tenant="globex"`)
	require.NotContains(t, body, `tenant="initech"`)
	require.Contains(t, body, "go_goroutines", "the runtime's metrics too")
	code, _ := get(t, addr, "/readyz")
	require.Equal(t, 200, code)
	require.NoError(t, r.stop())
}

// --registry-database-url relays the tenants of the registry table, a
// row each, without a databases file.
func TestRelayRegistryTable(t *testing.T) {
	requireNATS(t)
	acme := outboxDB(t)
	registry := pgtest.New(t)
	_, err := registry.DB.Exec(fleet.RegistryTableDDL("tenants"))
	require.NoError(t, err)
	_, err = registry.DB.Exec(`INSERT INTO tenants (name, database_url, schema) VALUES ('acme', $1, $2)`, pgtest.ServerURL(), acme.Schema)
	require.NoError(t, err)
	id := uuid.NewString()
	_, err = acme.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at)
		VALUES ($1, 'order.paid', 2, 'orders', 'Order', '1', '{}', now())`, id)
	require.NoError(t, err)
	prefix := "registry_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "_"
	got := receiveTenants(t, prefix)

	logs, stop := runInBackground("relay", "--registry-database-url", registry.URL, "--registry-table", "tenants",
		"--broker", "nats://"+testNATS, "--topic-prefix", prefix)
	defer stop() //nolint:errcheck // stopped below, this is for a failed test
	require.Eventually(t, func() bool { return len(got.snapshot()) == 1 }, patience, 50*time.Millisecond,
		"the registry's tenant's event arrives; logs:\n%s", logs)
	require.Equal(t, map[string]string{id: "acme"}, got.snapshot())
	require.NoError(t, stop())
}
