package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EntoutboxScheduledEventsOverdue fires once the earliest scheduled event
// has been due over a minute for 5 minutes (a relay that stopped
// promoting), and not over the moments a running promoter takes.
func TestScheduledOverdueAlert(t *testing.T) {
	promtool := requirePromtool(t)
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	const firing = `ALERTS{alertname="EntoutboxScheduledEventsOverdue", alertstate="firing"}`
	const want = `{labels: 'ALERTS{alertname="EntoutboxScheduledEventsOverdue", alertstate="firing", job="stuck", severity="warning"}', value: 1}`
	test := `rule_files: [` + rules + `]
evaluation_interval: 15s
tests:
  - interval: 1m
    input_series:
      # Promoting until minute 3, then stuck: the earliest due event's age grows.
      - series: 'entoutbox_scheduled_overdue_seconds{job="stuck", instance="r1"}'
        values: '0 0 0 0+60x20'
      # Promoting: events wait a moment past their time, never a minute.
      - series: 'entoutbox_scheduled_overdue_seconds{job="running", instance="r2"}'
        values: '0.05 0.2 0 0.5x20'
    promql_expr_test:
      - expr: '` + firing + `'
        eval_time: 9m
        exp_samples: []
      - expr: '` + firing + `'
        eval_time: 11m
        exp_samples: [` + want + `]
      - expr: '` + firing + `'
        eval_time: 20m
        exp_samples: [` + want + `]
`
	file := filepath.Join(t.TempDir(), "scheduled.yml")
	if err := os.WriteFile(file, []byte(test), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
