package main

import (
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The relay command's metrics read the scheduled events' table it
// promotes from (--scheduled-table), and observe how late the scheduled
// events it promoted reached the broker.
func TestRelayServesScheduledMetrics(t *testing.T) {
	t.Parallel()
	db := outboxDB(t)
	_, err := db.DB.Exec(`CREATE TABLE billing_scheduled (LIKE outbox_scheduled_events INCLUDING ALL)`)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO billing_scheduled
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{"order_id": 1}',
			clock_timestamp() + CASE WHEN g = 1 THEN interval '-2 seconds' ELSE interval '1 hour' END
		FROM generate_series(1, 3) g`) // one due 2 s ago, two waiting
	require.NoError(t, err)
	r := startRelay(t, "relay", "--database-url", db.URL, "--broker", "mem://", "--metrics-addr", "127.0.0.1:0",
		"--scheduled-table", "billing_scheduled", "--poll-interval", "20ms", "--log-format", "json")
	addr := r.opsAddr(t)
	value := func(body, series string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = get(t, addr, "/metrics")
		return code == http.StatusOK && value(body, `entoutbox_scheduled_lateness_seconds_count{topic="orders"}`) == 1
	}, patience, 50*time.Millisecond, "the due event promoted and sent; logs:\n%s", r.logs)
	require.GreaterOrEqual(t, value(body, `entoutbox_scheduled_lateness_seconds_sum{topic="orders"}`), 2.0,
		"sent at least 2 s after its time")
	require.Eventually(t, func() bool {
		_, body = get(t, addr, "/metrics")
		return value(body, "entoutbox_scheduled_waiting_events") == 2
	}, patience, 50*time.Millisecond, "the two waiting, read from --scheduled-table")
	require.Zero(t, value(body, "entoutbox_scheduled_overdue_events"))
	require.NoError(t, r.stop())
	checkMetrics(t, body)
}

// checkMetrics runs promtool check metrics (its linter) over a scrape:
// skipped without promtool, failed under CI=true.
func checkMetrics(t *testing.T, scrape string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is required under CI=true: %v", err)
		}
		t.Logf("not linting the metrics: no promtool (%v)", err)
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
}
