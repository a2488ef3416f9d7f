package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// patience bounds each wait for what a broker, a relay or PostgreSQL will
// do (a delivery, a dead letter, a start or stop): a liveness bound, not a
// speed limit. A passing test waits only as long as the work takes; on a
// loaded 2-core machine that is ten times as long as on an idle one.
const patience = 3 * time.Minute

const testNATS = "127.0.0.1:4222"

// syncBuffer is what the command logs, read while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runningRelay is the relay command run in-process.
type runningRelay struct {
	logs *syncBuffer
	stop func() error
}

// startRelay runs the root command with args until stop.
func startRelay(t *testing.T, args ...string) *runningRelay {
	t.Helper()
	logs := &syncBuffer{}
	cmd := newRootCommand()
	cmd.SetOut(logs)
	cmd.SetErr(logs)
	cmd.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(patience):
				t.Errorf("the relay did not stop within %s", patience)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return &runningRelay{logs: logs, stop: stop}
}

// jsonLines parses each line of logs as a JSON object.
func jsonLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "not a JSON line: %s", sc.Text())
		out = append(out, line)
	}
	return out
}

// opsAddr waits for the address the relay serves its health checks on,
// from its JSON log.
func (r *runningRelay) opsAddr(t *testing.T) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(r.logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "Serving metrics and health checks" {
				addr, _ = l["addr"].(string)
				return true
			}
		}
		return false
	}, patience, 10*time.Millisecond, "the relay did not say where it serves; logs:\n%s", r.logs)
	return addr
}

// get returns the status and body of http://addr/path.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	client := http.Client{Timeout: time.Minute}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// outboxDB creates the outbox tables in a schema of their own.
func outboxDB(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	return db
}

// withPassword is databaseURL through host (when not empty) with a
// password: the test server trusts local connections, so any password
// works, and none may be logged.
func withPassword(t *testing.T, databaseURL, host, password string) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	require.NoError(t, err)
	user := "postgres"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	if host != "" {
		u.Host = host
	}
	return u.String()
}

func requireNATS(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", testNATS, 30*time.Second) // a refused dial fails at once
	if err != nil {
		pgtest.Unavailable(t, "NATS at "+testNATS, err)
	}
	c.Close()
}

// --log-format json writes one JSON object a line, with the fields of each
// record, and no password of the database or broker URL; --metrics-addr
// serves the Go, process and library metrics and the health checks.
func TestRelayLogsJSONAndServesMetrics(t *testing.T) {
	requireNATS(t)
	db := outboxDB(t)
	const dbPassword, natsPassword = "db-s3cret-pw", "nats-s3cret-pw"
	r := startRelay(t, "relay", "--database-url", withPassword(t, db.URL, "", dbPassword),
		"--broker", "nats://relay:"+natsPassword+"@"+testNATS, "--log-format", "json", "--log-level", "debug",
		"--metrics-addr", "127.0.0.1:0", "--partitions", "4")
	addr := r.opsAddr(t)

	require.Eventually(t, func() bool { code, _ := get(t, addr, "/readyz"); return code == http.StatusOK },
		patience, 50*time.Millisecond, "never ready; logs:\n%s", r.logs)
	// Logged once the relay is ready, as the readiness probe sees it.
	require.Eventually(t, func() bool { return strings.Contains(r.logs.String(), `"msg":"Relay started"`) },
		patience, 50*time.Millisecond, "ready, but no 'Relay started' line; logs:\n%s", r.logs)
	code, body := get(t, addr, "/healthz")
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(t, addr, "/metrics")
	require.Equal(t, http.StatusOK, code, body)
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "entoutbox_relay_partitions_owned 4",
		"entoutbox_outbox_oldest_pending_age_seconds"} {
		require.Contains(t, body, name)
	}
	require.NoError(t, r.stop())

	logs := r.logs.String()
	require.NotContains(t, logs, dbPassword)
	require.NotContains(t, logs, natsPassword)
	lines := jsonLines(t, logs)
	var started map[string]any
	for _, l := range lines {
		for _, key := range []string{"time", "level", "msg"} {
			require.Contains(t, l, key, "line %v", l)
		}
		if l["msg"] == "Relay started" {
			started = l
		}
	}
	require.NotNil(t, started, "no 'Relay started' line in:\n%s", logs)
	require.Equal(t, "nats://relay:xxxxx@"+testNATS, started["broker"])
	require.Contains(t, started["database"], "postgres:xxxxx@")
	require.Equal(t, "fast", started["path"])
	require.Equal(t, "Relay stopped", lines[len(lines)-1]["msg"])
}

// /readyz answers 503, naming what is away, while the database or the
// broker is unreachable (each behind a proxy the test cuts), and 200 again
// once it is back; /healthz stays 200 meanwhile.
func TestReadyzFollowsDatabaseAndBroker(t *testing.T) {
	requireNATS(t)
	db := outboxDB(t)
	pgURL, err := url.Parse(pgtest.ServerURL())
	require.NoError(t, err)
	pgProxy := tcpproxy.Start(t, pgURL.Host)
	natsProxy := tcpproxy.Start(t, testNATS)
	// These two from the environment, as every flag.
	t.Setenv("ENTOUTBOX_LOG_FORMAT", "json")
	t.Setenv("ENTOUTBOX_METRICS_ADDR", "127.0.0.1:0")
	r := startRelay(t, "relay", "--database-url", withPassword(t, db.URL, pgProxy.Addr, "pw"),
		"--broker", "nats://"+natsProxy.Addr, "--partitions", "4", "--lease", "3s")
	addr := r.opsAddr(t)
	ready := func(t *testing.T, why string) {
		t.Helper()
		require.Eventually(t, func() bool { code, _ := get(t, addr, "/readyz"); return code == http.StatusOK },
			patience, 50*time.Millisecond, "%s; logs:\n%s", why, r.logs)
	}
	unready := func(t *testing.T, reason string) {
		t.Helper()
		var body string
		if !assert.Eventually(t, func() bool {
			var code int
			code, body = get(t, addr, "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, reason)
		}, patience, 50*time.Millisecond) {
			t.Fatalf("not unready with %q; last: %q", reason, body)
		}
		code, health := get(t, addr, "/healthz")
		require.Equal(t, http.StatusOK, code, health)
	}
	ready(t, "never ready")

	pgProxy.Cut()
	unready(t, "database is not reachable")
	pgProxy.Restore()
	ready(t, "not ready again after the database came back")

	natsProxy.Cut()
	unready(t, "broker is not reachable")
	natsProxy.Restore()
	ready(t, "not ready again after the broker came back")
	require.NoError(t, r.stop())
}

// Go's profiles are served only when asked for (--pprof): they show the
// code's inner workings to whoever reaches the address.
func TestOpsServerServesProfilesOnlyWithPprof(t *testing.T) {
	ready := func(context.Context) error { return nil }
	for _, profiles := range []bool{false, true} {
		ops, err := startOpsServer("127.0.0.1:0", prometheus.NewRegistry(), ready, slog.New(slog.DiscardHandler),
			newRedactor(), profiles)
		require.NoError(t, err)
		resp, err := http.Get("http://" + ops.addr + "/debug/pprof/")
		require.NoError(t, err)
		_ = resp.Body.Close()
		want := http.StatusNotFound
		if profiles {
			want = http.StatusOK
		}
		require.Equal(t, want, resp.StatusCode, "--pprof %v", profiles)
		ops.close()
	}
	_, err := run(t, nil, "relay", "--broker", "mem://", "--pprof")
	require.EqualError(t, err, "--pprof serves the profiles on --metrics-addr: set it too")
}

// At the default log level the relay names, at start, its topic prefix and
// the topics it publishes to, for a consumer's subscriptions to be checked
// against.
func TestRelayNamesItsTopicsAtTheDefaultLevel(t *testing.T) {
	db := outboxDB(t)
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		VALUES (gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', '1', '{}')`)
	require.NoError(t, err)
	r := startRelay(t, "relay", "--database-url", db.URL, "--broker", "mem://", "--topic-prefix", "staging_", "--log-format", "json")
	require.Eventually(t, func() bool { return strings.Contains(r.logs.String(), "Relay starting") },
		patience, 50*time.Millisecond, "no start line; logs:\n%s", r.logs)
	require.NoError(t, r.stop())
	var starting map[string]any
	for _, l := range jsonLines(t, r.logs.String()) {
		if l["msg"] == "Relay starting" {
			starting = l
		}
	}
	require.NotNil(t, starting)
	require.Equal(t, "INFO", starting["level"])
	require.Equal(t, "staging_", starting["topic_prefix"])
	require.Equal(t, "staging_<the event's topic>", starting["publishes_to"])
	require.Equal(t, "staging_orders", starting["recent_topics"])
	require.Equal(t, "outbox_events", starting["table"])
	require.Equal(t, "fast", starting["path"])
}
