package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// patience bounds each wait for what the relay or PostgreSQL will do: a
// liveness bound, not a speed limit.
const patience = 3 * time.Minute

// The job the rules expect the relays under (see alerts.yml).
const relayJob = "entoutbox-relay"

// The alerts that must fire when no relay can read the database, and by
// when: their threshold on the sample's age and their for, with room for
// scrapes slower than a second on a busy machine, and before the next
// alert's earliest time.
var outageAlerts = []struct {
	name  string
	after time.Duration // after the cut
}{
	{"EntoutboxRelayCannotReadDatabase", 5 * time.Minute},  // 1m, for 2m
	{"EntoutboxNoRelayHoldingPartitions", 5 * time.Minute}, // 1m, for 2m
	{"EntoutboxBacklogOld", 14 * time.Minute},              // 5m, for 5m
	{"EntoutboxBacklogStale", 52 * time.Minute},            // 30m, for 10m
}

// When the relay cannot read PostgreSQL, the shipped alerts fire: the
// backlog ones (with backlog="unknown") and the one that names the relay.
// The entoutbox relay command runs against a database behind a proxy;
// its /metrics is scraped every second, as Prometheus would, before and
// after the proxy is cut (while 100 events are committed directly, which
// the relay cannot see). What it exported is the input of `promtool test
// rules` over deploy/prometheus/alerts.yml, the cut continued for 53
// minutes: each series still exported goes on at the pace of its last
// five seconds (the sample's age grows by a second a second), the gauges
// the relay dropped stay absent. Before the cut no alert's expression
// holds.
func TestAlertsFireWhenTheRelayCannotReadTheDatabase(t *testing.T) {
	promtool := requirePromtool(t)
	bin := buildCommand(t)
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr

	addr := startRelay(t, bin, "relay", "--database-url", u.String(), "--broker", "mem://", "--metrics-addr", "127.0.0.1:0",
		"--log-format", "json", "--lease", "3s")
	waitFor(t, "the relay holding its partitions", func() bool {
		s, err := scrape(addr)
		return err == nil && s[`entoutbox_relays_holding_partitions`] == 1
	})

	const before, during = 10, 20 // scrapes, a second apart
	var scrapes []map[string]float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := range before + during {
		if i == before {
			proxy.Cut()
			if _, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
				aggregate_id, payload) SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}'
				FROM generate_series(1, 100) g`); err != nil {
				t.Fatal(err)
			}
		}
		s, err := scrape(addr)
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		scrapes = append(scrapes, s)
		<-tick.C
	}

	// What the relay said, read directly.
	if v := scrapes[before-1][`entoutbox_relays_holding_partitions`]; v != 1 {
		t.Errorf("before the cut: relays holding partitions %v, want 1", v)
	}
	last := scrapes[len(scrapes)-1]
	for _, name := range []string{"entoutbox_outbox_pending_events", "entoutbox_outbox_oldest_pending_age_seconds",
		"entoutbox_relays_holding_partitions", "entoutbox_dead_letters"} {
		for key := range last {
			if key == name || strings.HasPrefix(key, name+"{") {
				t.Errorf("cut off for %ds, the relay still exports %s %v", during, key, last[key])
			}
		}
	}
	if age := last["entoutbox_backlog_sample_age_seconds"]; age < during-6 {
		t.Errorf("cut off for %ds, the relay says its backlog sample is %vs old", during, age)
	}
	if n := last["entoutbox_backlog_sample_errors_total"]; n < 1 {
		t.Errorf("cut off for %ds, the relay counts %v failed samples", during, n)
	}

	test := promtoolTest(t, scrapes, before, addr)
	file := filepath.Join(t.TempDir(), "outage_test.yml")
	if err := os.WriteFile(file, test, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\nits input, from the relay's scrapes:\n%s", err, out, test)
	}
}

// promtoolTest is a promtool rule test of the shipped rules over the
// scraped series (one scrape a second, the proxy cut before scrape cut),
// continued to the last alert's time.
func promtoolTest(t *testing.T, scrapes []map[string]float64, cut int, instance string) []byte {
	t.Helper()
	rulesPath, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(readFile(t, alertsFile), false, model.LegacyValidation, parser.NewParser(parser.Options{}),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	severity := map[string]string{}
	var exprs []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				severity[r.Alert] = r.Labels["severity"]
				exprs = append(exprs, r.Expr)
			}
		}
	}

	end := cut + int(outageAlerts[len(outageAlerts)-1].after/time.Second) + 60
	keys := map[string]bool{}
	for _, s := range scrapes {
		for k := range s {
			keys[k] = true
		}
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	input := []series{{Series: fmt.Sprintf(`up{job=%q, instance=%q}`, relayJob, instance),
		Values: fmt.Sprintf("1+0x%d", end-1)}}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		input = append(input, series{Series: withTarget(k, instance), Values: seriesValues(scrapes, k, end)})
	}

	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	var tests []exprTest
	for _, e := range exprs {
		tests = append(tests, exprTest{Expr: e, EvalTime: fmt.Sprintf("%ds", cut-1), ExpSamples: []sample{}})
	}
	// The outage alerts firing at each of their times: those due by then.
	var names []string
	for _, a := range outageAlerts {
		names = append(names, a.name)
	}
	firing := fmt.Sprintf(`ALERTS{alertstate="firing", alertname=~%q}`, strings.Join(names, "|"))
	checked := map[time.Duration]bool{}
	for _, a := range outageAlerts {
		if checked[a.after] {
			continue
		}
		checked[a.after] = true
		want := []sample{}
		for _, b := range outageAlerts {
			if b.after > a.after {
				continue
			}
			labels := fmt.Sprintf(`alertname=%q, alertstate="firing", job=%q, severity=%q`, b.name, relayJob, severity[b.name])
			if b.name == "EntoutboxRelayCannotReadDatabase" {
				labels += fmt.Sprintf(", instance=%q", instance) // by relay
			} else {
				labels += `, backlog="unknown"` // by job, from no relay's sample
			}
			want = append(want, sample{Labels: "ALERTS{" + labels + "}", Value: 1})
		}
		tests = append(tests, exprTest{Expr: firing, EvalTime: fmt.Sprintf("%ds", cut+int(a.after/time.Second)), ExpSamples: want})
	}

	// JSON is YAML.
	doc := map[string]any{
		"rule_files":          []string{rulesPath},
		"evaluation_interval": "15s",
		"tests": []map[string]any{{
			"interval":         "1s",
			"input_series":     input,
			"promql_expr_test": tests,
		}},
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withTarget adds the labels Prometheus adds to what it scrapes.
func withTarget(key, instance string) string {
	target := fmt.Sprintf(`job=%q, instance=%q`, relayJob, instance)
	if name, labels, ok := strings.Cut(key, "{"); ok {
		return name + "{" + strings.TrimSuffix(labels, "}") + ", " + target + "}"
	}
	return key + "{" + target + "}"
}

// seriesValues writes key's values in promtool's notation: one a scrape,
// "stale" where it stopped being exported (as Prometheus marks it), then
// the last scrape continued to end steps. A series exported at the last
// scrape goes on at the pace of its last five seconds, or stays where it
// is if that pace was not upwards.
func seriesValues(scrapes []map[string]float64, key string, end int) string {
	var vals []string
	present := false
	for _, s := range scrapes {
		v, ok := s[key]
		switch {
		case ok:
			vals = append(vals, strconv.FormatFloat(v, 'g', -1, 64))
		case present:
			vals = append(vals, "stale")
		default:
			vals = append(vals, "_")
		}
		present = ok
	}
	rest := end - len(scrapes)
	n := len(scrapes)
	last, ok := scrapes[n-1][key]
	if !ok {
		return strings.Join(vals, " ") + fmt.Sprintf(" _x%d", rest)
	}
	pace := 0.0
	if n >= 6 {
		if earlier, ok := scrapes[n-6][key]; ok {
			pace = max((last-earlier)/5, 0)
		}
	}
	return strings.Join(vals, " ") + fmt.Sprintf(" %s+%sx%d",
		strconv.FormatFloat(last+pace, 'g', -1, 64), strconv.FormatFloat(pace, 'g', -1, 64), rest-1)
}

// scrape reads the entoutbox series of the relay's /metrics, by their
// selector (name{label="value", ...}, labels sorted).
func scrape(addr string) (map[string]float64, error) {
	client := http.Client{Timeout: time.Minute}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "entoutbox_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var v float64
			switch {
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			default:
				continue // histograms: no rule reads them
			}
			if math.IsNaN(v) {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ", ") + "}"
			}
			out[key] = v
		}
	}
	return out, nil
}

// requirePromtool is the path of Prometheus' promtool; without it the
// test is skipped, or fails under CI=true.
func requirePromtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is required under CI=true: %v", err)
		}
		t.Skipf("skipping: no promtool (%v); install Prometheus (Debian: apt-get install prometheus), or set CI=true to fail instead", err)
	}
	return path
}

// buildCommand builds cmd/entoutbox once per test binary.
var buildCommand = func() func(t *testing.T) string {
	build := sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "entoutbox-cmd")
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, "entoutbox")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/entoutbox").CombinedOutput(); err != nil {
			return "", fmt.Errorf("%w:\n%s", err, out)
		}
		return bin, nil
	})
	return func(t *testing.T) string {
		t.Helper()
		bin, err := build()
		if err != nil {
			t.Fatalf("building the entoutbox command: %v", err)
		}
		return bin
	}
}()

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startRelay runs the command with args until the test ends, and returns
// the address it serves /metrics on, from its JSON log.
func startRelay(t *testing.T, bin string, args ...string) string {
	t.Helper()
	logs := &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(patience):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("the relay's log:\n%s", logs)
		}
	})
	var addr string
	waitFor(t, "the relay to say where it serves /metrics", func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "Serving metrics and health checks" {
				addr, _ = l["addr"].(string)
				return true
			}
		}
		select {
		case <-done:
			t.Fatalf("the relay exited:\n%s", logs)
		default:
		}
		return false
	})
	return addr
}

// waitFor polls cond until it holds, failing t after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", patience, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
