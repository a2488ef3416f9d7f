package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

const (
	alertsFile    = "prometheus/alerts.yml"
	dashboardFile = "grafana/entoutbox.json"
)

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"job", "instance"}

// foreignMetrics are the names rules may use that are not the library's.
var foreignMetrics = map[string][]string{"up": nil}

func TestAlertRules(t *testing.T) {
	data := readFile(t, alertsFile)
	for _, err := range checkRules(data, registeredMetrics(t)) {
		t.Error(err)
	}
}

func TestDashboard(t *testing.T) {
	data := readFile(t, dashboardFile)
	for _, err := range checkDashboard(data, registeredMetrics(t)) {
		t.Error(err)
	}
}

// TestDashboardShowsEveryMetric fails when the library registers a metric
// no panel shows: add a panel with it.
func TestDashboardShowsEveryMetric(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	shown := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, pn := range ps {
			walk(pn.Panels)
			for _, tg := range pn.Targets {
				e, err := p.ParseExpr(grafanaVariables.Replace(tg.Expr))
				if err != nil {
					continue // TestDashboard reports it
				}
				for _, sel := range parser.ExtractSelectors(e) {
					for _, m := range sel {
						if m.Name == labels.MetricName {
							shown[m.Value] = true
						}
					}
				}
			}
		}
	}
	walk(d.Panels)
	for name := range registeredMetrics(t) {
		if !shown[name] && !shown[name+"_bucket"] && !shown[name+"_sum"] && !shown[name+"_count"] {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// TestRegisteredMetricsAreRead guards the reading of descriptors: without
// labels every matcher would be refused, with too many none would.
func TestRegisteredMetricsAreRead(t *testing.T) {
	known := registeredMetrics(t)
	for name, want := range map[string][]string{
		"entoutbox_relay_published_total":             {"topic", "result"},
		"entoutbox_outbox_oldest_pending_age_seconds": nil,
		"entoutbox_consumer_deliveries_total":         {"consumer", "event", "result"},
	} {
		got, ok := known[name]
		if !ok || !slices.Equal(got, want) {
			t.Errorf("%s: labels %v (registered: %t), want %v", name, got, ok, want)
		}
	}
}

// TestChecksCatchMistakes breaks the shipped files in memory and expects the
// checks above to notice: a metric the library does not register, a label it
// does not carry and PromQL that does not parse.
func TestChecksCatchMistakes(t *testing.T) {
	known := registeredMetrics(t)
	alerts := string(readFile(t, alertsFile))
	dashboard := string(readFile(t, dashboardFile))
	cases := []struct {
		name, file, old, new, want string
	}{
		{"rule metric typo", alertsFile, "entoutbox_relay_published_total{", "entoutbox_relay_publishd_total{", `"entoutbox_relay_publishd_total" is not a metric`},
		{"rule label typo", alertsFile, `{result="error"}`, `{reslt="error"}`, `label "reslt"`},
		{"rule syntax error", alertsFile, "[5m]))\n", "[5m])\n", "parse error"},
		{"dashboard metric typo", dashboardFile, "entoutbox_relay_delivery_lag_seconds_bucket", "entoutbox_relay_delivery_lag_bucket", `"entoutbox_relay_delivery_lag_bucket" is not a metric`},
		{"dashboard grouping typo", dashboardFile, "max by (source)", "max by (sorce)", `label "sorce"`},
		{"dashboard syntax error", dashboardFile, "(rate(entoutbox_relay_retries_total", "(rate(entoutbox_relay_retries_total(", "parse error"},
		{"dashboard panel without targets", dashboardFile, `"expr": "max(entoutbox_relays_holding_partitions)"`, `"exp": "max(entoutbox_relays_holding_partitions)"`, "no expr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := alerts
			check := checkRules
			if c.file == dashboardFile {
				src, check = dashboard, checkDashboard
			}
			if !strings.Contains(src, c.old) {
				t.Fatalf("%s no longer contains %q: update this case", c.file, c.old)
			}
			errs := check([]byte(strings.Replace(src, c.old, c.new, 1)), known)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), c.want) }) {
				t.Errorf("broken %s: want an error containing %q, got %v", c.file, c.want, errs)
			}
		})
	}
}

// TestReferencesExist fails when an alert's text points to a dashboard
// panel or another alert that does not exist, or mentions the dashboard
// without naming the panel: the person paged follows them.
func TestReferencesExist(t *testing.T) {
	for _, err := range checkReferences(readFile(t, alertsFile), readFile(t, dashboardFile)) {
		t.Error(err)
	}
}

// TestReferenceChecksCatchMistakes breaks the shipped files in memory and
// expects checkReferences to notice.
func TestReferenceChecksCatchMistakes(t *testing.T) {
	alerts := string(readFile(t, alertsFile))
	dashboard := string(readFile(t, dashboardFile))
	cases := []struct {
		name, file, old, new, want string
	}{
		{"panel renamed", dashboardFile, `"title": "Consumer dead letters by consumer and reason"`, `"title": "Consumer dead letters"`,
			`panel "Consumer dead letters by consumer and reason"`},
		{"second panel of a list renamed", dashboardFile, `"title": "Dead-lettered by the relay"`, `"title": "Relay dead letters"`,
			`panel "Dead-lettered by the relay"`},
		{"dashboard without a panel", alertsFile, `dashboard's panel "Delivery lag"`, `dashboard`, "names no panel"},
		{"alert name typo", alertsFile, "(EntoutboxDeadLettersRising)", "(EntoutboxDeadLetterRising)", `"EntoutboxDeadLetterRising"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, d := alerts, dashboard
			src := &a
			if c.file == dashboardFile {
				src = &d
			}
			if !strings.Contains(*src, c.old) {
				t.Fatalf("%s no longer contains %q: update this case", c.file, c.old)
			}
			*src = strings.Replace(*src, c.old, c.new, 1)
			errs := checkReferences([]byte(a), []byte(d))
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), c.want) }) {
				t.Errorf("broken %s: want an error containing %q, got %v", c.file, c.want, errs)
			}
		})
	}
}

var (
	// panelRef is how alert texts name panels: panel "Title", or panels
	// "A", "B" and "C".
	panelRef   = regexp.MustCompile(`\bpanels?\s+((?:"[^"]+"(?:\s*(?:,|and|or)\s*)?)+)`)
	quoted     = regexp.MustCompile(`"([^"]+)"`)
	alertRef   = regexp.MustCompile(`\bEntoutbox[A-Z][A-Za-z]+\b`)
	dashboardW = regexp.MustCompile(`(?i)\bdashboard\b`)
)

// checkReferences checks the cross-references of the shipped files: every
// panel an alert's annotation names exists in the dashboard, an annotation
// that mentions the dashboard names its panel, and every alert name the
// annotations or the panels' descriptions mention is a rule.
func checkReferences(alertsData, dashboardData []byte) []error {
	groups, errs := rulefmt.Parse(alertsData, false, model.LegacyValidation, parser.NewParser(parser.Options{}),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		return errs
	}
	var d struct {
		Panels []struct {
			Title       string `json:"title"`
			Description string `json:"description"`
			Panels      []struct {
				Title       string `json:"title"`
				Description string `json:"description"`
			} `json:"panels"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboardData, &d); err != nil {
		return []error{fmt.Errorf("decoding dashboard: %w", err)}
	}
	titles := map[string]bool{}
	var descriptions []string
	for _, p := range d.Panels {
		titles[p.Title] = true
		descriptions = append(descriptions, p.Description)
		for _, q := range p.Panels {
			titles[q.Title] = true
			descriptions = append(descriptions, q.Description)
		}
	}
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
		}
	}
	checkAlerts := func(where, text string) {
		for _, name := range alertRef.FindAllString(text, -1) {
			if !alerts[name] {
				errs = append(errs, fmt.Errorf("%s mentions alert %q, which is not a rule", where, name))
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			for key, text := range r.Annotations {
				where := fmt.Sprintf("alert %s %s", r.Alert, key)
				checkAlerts(where, text)
				refs := panelRef.FindAllStringSubmatch(text, -1)
				if dashboardW.MatchString(text) && len(refs) == 0 {
					errs = append(errs, fmt.Errorf(`%s mentions the dashboard but names no panel (write: panel "Title")`, where))
				}
				for _, ref := range refs {
					for _, title := range quoted.FindAllStringSubmatch(ref[1], -1) {
						if !titles[title[1]] {
							errs = append(errs, fmt.Errorf("%s names panel %q, which the dashboard does not have", where, title[1]))
						}
					}
				}
			}
		}
	}
	for _, text := range descriptions {
		checkAlerts("a panel's description", text)
	}
	return errs
}

// checkRules parses an alert rule file as Prometheus does (rulefmt validates
// each expression and template) and checks each rule's metrics and
// annotations.
func checkRules(data []byte, known map[string][]string) []error {
	groups, errs := rulefmt.Parse(data, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		return errs
	}
	if len(groups.Groups) == 0 {
		return []error{errors.New("no rule groups")}
	}
	p := parser.NewParser(parser.Options{})
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if r.Alert != "" {
				if s := r.Labels["severity"]; s != "warning" && s != "critical" {
					errs = append(errs, fmt.Errorf("alert %s: severity %q, want warning or critical", name, s))
				}
				for _, a := range []string{"summary", "description"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						errs = append(errs, fmt.Errorf("alert %s: no %s annotation", name, a))
					}
				}
			}
			for _, err := range checkExpr(p, r.Expr, known) {
				errs = append(errs, fmt.Errorf("rule %s: %w", name, err))
			}
		}
	}
	return errs
}

type dashboard struct {
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		RefID      string     `json:"refId"`
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// grafanaVariables stand in for the dashboard's variables so that the
// expressions parse as PromQL; the all-value of a multi-value variable is ".*".
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	"${topic}", ".*", "$topic", ".*", "${consumer}", ".*", "$consumer", ".*", "${tenant}", ".*", "$tenant", ".*",
)

// checkDashboard decodes a Grafana dashboard and checks that it takes its
// Prometheus from the ${datasource} variable and that every panel has a title
// and queries that parse and use only known metrics.
func checkDashboard(data []byte, known map[string][]string) []error {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []error{fmt.Errorf("decoding dashboard: %w", err)}
	}
	var errs []error
	if d.Title == "" {
		errs = append(errs, errors.New("dashboard has no title"))
	}
	if d.SchemaVersion < 36 {
		errs = append(errs, fmt.Errorf("schemaVersion %d: want 36 or later (datasource references by uid)", d.SchemaVersion))
	}
	if !slices.ContainsFunc(d.Templating.List, func(v variable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		errs = append(errs, errors.New(`no "datasource" variable of type datasource querying prometheus`))
	}
	wantDS := datasource{Type: "prometheus", UID: "${datasource}"}
	p := parser.NewParser(parser.Options{})
	var panels int
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, pn := range ps {
			if strings.TrimSpace(pn.Title) == "" {
				errs = append(errs, fmt.Errorf("panel %d has no title", pn.ID))
			}
			if pn.Type == "row" {
				walk(pn.Panels)
				continue
			}
			panels++
			where := fmt.Sprintf("panel %q", pn.Title)
			if pn.Datasource != wantDS {
				errs = append(errs, fmt.Errorf("%s: datasource %+v, want %+v", where, pn.Datasource, wantDS))
			}
			if len(pn.Targets) == 0 {
				errs = append(errs, fmt.Errorf("%s: no targets", where))
			}
			for _, tg := range pn.Targets {
				where := fmt.Sprintf("%s target %s", where, tg.RefID)
				if tg.Datasource != wantDS {
					errs = append(errs, fmt.Errorf("%s: datasource %+v, want %+v", where, tg.Datasource, wantDS))
				}
				if strings.TrimSpace(tg.Expr) == "" {
					errs = append(errs, fmt.Errorf("%s: no expr", where))
					continue
				}
				for _, err := range checkExpr(p, grafanaVariables.Replace(tg.Expr), known) {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
				}
			}
		}
	}
	walk(d.Panels)
	if panels == 0 {
		errs = append(errs, errors.New("dashboard has no panels"))
	}
	return errs
}

// checkExpr parses a PromQL expression and checks that each series it
// selects is a known metric, that its matchers use that metric's labels and
// that each "by" grouping names a label some series under it carries.
func checkExpr(p parser.Parser, expr string, known map[string][]string) []error {
	e, err := p.ParseExpr(expr)
	if err != nil {
		return []error{fmt.Errorf("%q: %w", expr, err)}
	}
	var errs []error
	for _, sel := range parser.ExtractSelectors(e) {
		name, labelNames, err := selectedMetric(sel, known)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range sel {
			if m.Name != labels.MetricName && !slices.Contains(labelNames, m.Name) {
				errs = append(errs, fmt.Errorf("%s has no label %q (it has %v)", name, m.Name, labelNames))
			}
		}
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		agg, ok := n.(*parser.AggregateExpr)
		if !ok || agg.Without {
			return nil
		}
		var available []string
		for _, sel := range parser.ExtractSelectors(agg.Expr) {
			if _, labelNames, err := selectedMetric(sel, known); err == nil {
				available = append(available, labelNames...)
			}
		}
		for _, g := range agg.Grouping {
			if !slices.Contains(available, g) {
				errs = append(errs, fmt.Errorf("%q groups by label %q, which none of its series has (they have %v)", agg.String(), g, available))
			}
		}
		return nil
	})
	return errs
}

// selectedMetric returns the metric a selector names and the labels its
// series carry: a histogram's _bucket, _sum and _count series are its own,
// _bucket with "le".
func selectedMetric(sel []*labels.Matcher, known map[string][]string) (string, []string, error) {
	var name string
	for _, m := range sel {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		return "", nil, fmt.Errorf("selector %v names no metric", sel)
	}
	if ls, ok := foreignMetrics[name]; ok {
		return name, append(ls, targetLabels...), nil
	}
	if ls, ok := known[name]; ok {
		return name, append(slices.Clone(ls), targetLabels...), nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if ls, ok := known[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) {
			ls = append(slices.Clone(ls), targetLabels...)
			if suffix == "_bucket" {
				ls = append(ls, "le")
			}
			return name, ls, nil
		}
	}
	return name, nil, fmt.Errorf("%q is not a metric the library registers", name)
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// descPattern reads a metric's name and variable labels out of
// prometheus.Desc's String form, the only place client_golang exposes them.
var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), .*constLabels: \{(.*)\}, variableLabels: \{([^}]*)\}\}$`)

// registeredMetrics lists the metrics package metrics registers, and the
// relay fleet's own (package relay/fleet), with their
// labels: read from the collectors' descriptors, which name every metric,
// also a label vector that has no series yet (Gather would leave it out).
func registeredMetrics(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	registerFleetMetrics(t, reg)
	descs := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(descs)
		close(descs)
	}()
	known := map[string][]string{}
	for d := range descs {
		m := descPattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil {
			t.Fatalf("cannot read the name of %s: %v", d, err)
		}
		var labelNames []string
		for _, pair := range strings.Split(m[2], ",") {
			if k, _, ok := strings.Cut(pair, "="); ok {
				labelNames = append(labelNames, k)
			}
		}
		for _, l := range strings.Split(m[3], ",") {
			if l != "" {
				labelNames = append(labelNames, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
			}
		}
		known[name] = labelNames
	}
	if len(known) == 0 {
		t.Fatal("metrics.New registered no metrics")
	}
	return known
}

// registerFleetMetrics registers the relay fleet's own metrics on reg: its
// tenants' states and backlog (each tenant's relay metrics are package
// metrics', labelled tenant).
func registerFleetMetrics(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	f, err := fleet.New(fleet.Config{File: "databases.json", Relay: relay.Config{Publisher: gochannel.NewGoChannel(
		gochannel.Config{}, watermill.NopLogger{})}, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no tenant to read: the descriptors are enough
	if err := f.WatchBacklogs(ctx, fleet.BacklogConfig{}); err != nil {
		t.Fatal(err)
	}
}
