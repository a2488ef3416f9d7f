package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
)

// fleetJob is the job the fleet's series carry in these tests.
const fleetJob = "entoutbox-relay"

// fleetSeries is a fleet's scrapes, one a minute: acme goes down at 5m
// and its oldest event ages from the start; globex is healthy all along
// (its one dead letter old news); initech cannot be read (no backlog
// gauges, its sample age growing); two of the tenants past the bound are
// down and their oldest event is 400 s old; acme and _other get new dead
// letters at 21m.
var fleetSeries = map[string]string{
	`entoutbox_fleet_tenant_down{tenant="acme"}`:                          "0x4 1x40",
	`entoutbox_fleet_tenant_down{tenant="globex"}`:                        "0x45",
	`entoutbox_fleet_tenant_down{tenant="initech"}`:                       "0x45",
	`entoutbox_fleet_tenant_down{tenant="_other"}`:                        "2x45",
	`entoutbox_fleet_tenant_oldest_pending_age_seconds{tenant="acme"}`:    "0+60x45",
	`entoutbox_fleet_tenant_oldest_pending_age_seconds{tenant="globex"}`:  "0x45",
	`entoutbox_fleet_tenant_oldest_pending_age_seconds{tenant="_other"}`:  "400x45",
	`entoutbox_fleet_tenant_backlog_sample_age_seconds{tenant="acme"}`:    "5x45",
	`entoutbox_fleet_tenant_backlog_sample_age_seconds{tenant="globex"}`:  "5x45",
	`entoutbox_fleet_tenant_backlog_sample_age_seconds{tenant="initech"}`: "0+60x45",
	`entoutbox_fleet_tenant_backlog_sample_age_seconds{tenant="_other"}`:  "5x45",
	`entoutbox_fleet_tenant_backlog_unread{tenant="acme"}`:                "0x45",
	`entoutbox_fleet_tenant_backlog_unread{tenant="globex"}`:              "0x45",
	`entoutbox_fleet_tenant_backlog_unread{tenant="initech"}`:             "1x45",
	`entoutbox_fleet_tenant_backlog_unread{tenant="_other"}`:              "0x45",
	`entoutbox_fleet_tenant_dead_letters{tenant="acme"}`:                  "0x20 3x25",
	`entoutbox_fleet_tenant_dead_letters{tenant="globex"}`:                "1x45",
	`entoutbox_fleet_tenant_dead_letters{tenant="_other"}`:                "0x20 2x25",
	`entoutbox_fleet_tenant_pending_events{tenant="acme"}`:                "1x45",
	`entoutbox_fleet_tenant_pending_events{tenant="globex"}`:              "0x45",
	`entoutbox_fleet_tenant_held_aggregates{tenant="globex"}`:             "0x45",
}

// fleetAlert is an alert expected to fire: its labels from the expression
// (job, tenant, and backlog for an unknown backlog) and its value.
type fleetAlert struct {
	labels map[string]string
	value  float64
}

// fleetCase is the fleet alerts of one name firing at one time; none
// when alerts is empty (every healthy tenant, and those not due yet).
type fleetCase struct {
	alert, at string
	alerts    []fleetAlert
}

func tenant(name string, value float64, extra ...string) fleetAlert {
	l := map[string]string{"job": fleetJob, "tenant": name}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return fleetAlert{labels: l, value: value}
}

var fleetCases = []fleetCase{
	{"EntoutboxFleetTenantDown", "4m", nil}, // _other down since 0m, not for 5m yet
	{"EntoutboxFleetTenantDown", "6m", []fleetAlert{tenant("_other", 2)}},
	{"EntoutboxFleetTenantDown", "12m", []fleetAlert{tenant("_other", 2), tenant("acme", 1)}},
	{"EntoutboxFleetTenantBacklogOld", "8m", []fleetAlert{tenant("_other", 400)}},
	{"EntoutboxFleetTenantBacklogOld", "15m", []fleetAlert{tenant("_other", 400), tenant("acme", 900),
		tenant("initech", 900, "backlog", "unknown")}},
	{"EntoutboxFleetTenantBacklogUnread", "5m", nil},
	{"EntoutboxFleetTenantBacklogUnread", "15m", []fleetAlert{tenant("initech", 1)}},
	{"EntoutboxFleetTenantDeadLettersRising", "15m", nil}, // globex's one letter is old news
	{"EntoutboxFleetTenantDeadLettersRising", "25m", []fleetAlert{tenant("_other", 2), tenant("acme", 3)}},
	{"EntoutboxFleetTenantDeadLettersOpen", "40m", nil}, // open, not for a day yet
}

// The fleet's rules fire per tenant, name it (or say _other and where the
// others' names are) and say what to run; a healthy tenant fires none.
// promtool evaluates the shipped rules over a fleet's series; the
// expected annotations are the rules' templates expanded as Prometheus
// expands them, and checked to name the tenant and the command.
func TestFleetAlertRules(t *testing.T) {
	promtool := requirePromtool(t)
	rulesPath, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	rules := fleetRules(t)
	input := []map[string]string{}
	for _, s := range slices.Sorted(maps.Keys(fleetSeries)) {
		input = append(input, map[string]string{"series": withJob(s), "values": fleetSeries[s]})
	}
	var tests []map[string]any
	for _, c := range fleetCases {
		rule, ok := rules[c.alert]
		if !ok {
			t.Fatalf("no rule %s in %s", c.alert, alertsFile)
		}
		exp := []map[string]any{}
		for _, a := range c.alerts {
			annotations := expandAnnotations(t, rule, a)
			checkNamesTenant(t, c.alert, a.labels["tenant"], annotations)
			labels := maps.Clone(a.labels)
			maps.Copy(labels, rule.Labels)
			exp = append(exp, map[string]any{"exp_labels": labels, "exp_annotations": annotations})
		}
		tests = append(tests, map[string]any{"eval_time": c.at, "alertname": c.alert, "exp_alerts": exp})
	}
	// A day of dead letters left open: globex's, and acme's and _other's.
	open := rules["EntoutboxFleetTenantDeadLettersOpen"]
	var openExp []map[string]any
	for _, a := range []fleetAlert{tenant("_other", 2), tenant("acme", 3), tenant("globex", 1)} {
		labels := maps.Clone(a.labels)
		maps.Copy(labels, open.Labels)
		annotations := expandAnnotations(t, open, a)
		checkNamesTenant(t, open.Alert, a.labels["tenant"], annotations)
		openExp = append(openExp, map[string]any{"exp_labels": labels, "exp_annotations": annotations})
	}
	day := []map[string]string{
		{"series": withJob(`entoutbox_fleet_tenant_dead_letters{tenant="acme"}`), "values": "3x1600"},
		{"series": withJob(`entoutbox_fleet_tenant_dead_letters{tenant="globex"}`), "values": "1x1600"},
		{"series": withJob(`entoutbox_fleet_tenant_dead_letters{tenant="_other"}`), "values": "2x1600"},
		{"series": withJob(`entoutbox_fleet_tenant_dead_letters{tenant="initech"}`), "values": "0x1600"},
	}
	doc := map[string]any{
		"rule_files":          []string{rulesPath},
		"evaluation_interval": "1m",
		"tests": []map[string]any{
			{"interval": "1m", "input_series": input, "alert_rule_test": tests},
			{"interval": "1m", "input_series": day, "alert_rule_test": []map[string]any{
				{"eval_time": "23h", "alertname": open.Alert, "exp_alerts": []map[string]any{}},
				{"eval_time": "25h", "alertname": open.Alert, "exp_alerts": openExp},
			}},
		},
	}
	data, err := json.MarshalIndent(doc, "", "  ") // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "fleet_test.yml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\nits input:\n%s", err, out, data)
	}
}

// withJob adds the fleet's target labels to a series.
func withJob(series string) string {
	return strings.Replace(series, "{", fmt.Sprintf(`{job=%q, instance="fleet:9090", `, fleetJob), 1)
}

// fleetRules is the shipped rules of the fleet's group, by name.
func fleetRules(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.Parse(readFile(t, alertsFile), false, model.LegacyValidation, parser.NewParser(parser.Options{}),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	out := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if strings.HasPrefix(r.Alert, "EntoutboxFleet") {
				out[r.Alert] = r
			}
		}
	}
	return out
}

// expandAnnotations expands rule's annotations for alert a as Prometheus
// does (rules/alerting.go: the same variables, the same expander).
func expandAnnotations(t *testing.T, rule rulefmt.Rule, a fleetAlert) map[string]string {
	t.Helper()
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := template.AlertTemplateData(a.labels, nil, "", promql.Sample{F: a.value})
	out := map[string]string{}
	for k, text := range rule.Annotations {
		e := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+rule.Alert, data, 0, nil, nil, nil)
		v, err := e.Expand()
		if err != nil {
			t.Fatalf("alert %s annotation %s: %v", rule.Alert, k, err)
		}
		out[k] = v
	}
	return out
}

// checkNamesTenant fails unless the summary names the tenant (or says
// how many past the bound) and the description says what to run.
func checkNamesTenant(t *testing.T, alert, tenant string, annotations map[string]string) {
	t.Helper()
	summary, description := annotations["summary"], annotations["description"]
	if tenant == "_other" {
		if !strings.Contains(summary, "_other") && !strings.Contains(summary, "past --metrics-tenants") {
			t.Errorf("%s for _other: the summary %q says nothing of the tenants past the bound", alert, summary)
		}
		if !strings.Contains(description, "--metrics-tenants") {
			t.Errorf("%s for _other: the description does not say where their names are: %q", alert, description)
		}
	} else if !strings.Contains(strings.ToLower(summary), "tenant "+tenant) {
		t.Errorf("%s: the summary %q does not name tenant %s", alert, summary, tenant)
	}
	if !strings.Contains(description, "entoutbox status --databases-file") {
		t.Errorf("%s: the description does not say to run entoutbox status --databases-file: %q", alert, description)
	}
}
