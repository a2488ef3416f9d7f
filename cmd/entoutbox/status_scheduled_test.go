package main

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// Scheduled events show in status, text and JSON: how many wait, when the
// next is due by the database's clock, those due and not moved (overdue:
// a stuck promoter), and those cancelled; --max-overdue fails on them.
func TestStatusShowsScheduledEvents(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, testStatusShowsScheduledEvents)
}

func testStatusShowsScheduledEvents(t *testing.T, db statusDB) {
	schedule := func(topic string, n int, in time.Duration, cancelled bool) {
		t.Helper()
		cancelledAt := "NULL"
		if cancelled {
			cancelledAt = db.now()
		}
		for g := 1; g <= n; g++ {
			db.exec(t, `INSERT INTO outbox_scheduled_events
				(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, cancelled_at)
				VALUES ($1, 'order.reminded', 1, $2, 'Order', $3, '{}', `+db.at(in)+`, `+cancelledAt+`)`,
				uuid.NewString(), topic, strconv.Itoa(g))
		}
	}
	status := func(args ...string) (string, error) {
		return run(t, nil, append([]string{"status", "--database-url", db.URL}, args...)...)
	}

	schedule("orders", 3, time.Hour, false)
	schedule("orders", 2, 3*time.Hour, true)
	out, err := status()
	require.NoError(t, err)
	require.Regexp(t, `\nscheduled events:    3 waiting, the next due \S+Z \(in (59m5\d|1h0m0)s\), 2 cancelled\n`, out)
	require.NotContains(t, out, "OVERDUE")

	schedule("mail", 1, -2*time.Minute, false) // due, and no relay moved it
	var st struct {
		Scheduled struct {
			Table                       bool
			Waiting, Overdue, Cancelled int64
			NextDue                     *string `json:"next_due"`
			NextDueIn                   float64 `json:"next_due_in_seconds"`
			OverdueSeconds              float64 `json:"overdue_seconds"`
			WaitingCapped               bool    `json:"waiting_capped"`
			Topics                      []struct {
				Topic            string
				Waiting, Overdue int64
			}
		}
		Problems []string
	}
	out, err = status("--json", "--max-overdue", "1m")
	require.Error(t, err)
	require.Regexp(t, `^status: a scheduled event has been due for 2m\d+\.\d+s without being sent, more than the maximum 1m0s `+
		`\(1 overdue: is a relay running\?\)$`, err.Error())
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, []string{err.Error()[len("status: "):]}, st.Problems)
	s := st.Scheduled
	require.True(t, s.Table)
	require.Equal(t, int64(4), s.Waiting)
	require.Equal(t, int64(1), s.Overdue)
	require.Equal(t, int64(2), s.Cancelled)
	require.NotNil(t, s.NextDue)
	require.InDelta(t, -120, s.NextDueIn, 20, "due two minutes ago by the database's clock")
	require.InDelta(t, 120, s.OverdueSeconds, 20)
	require.Len(t, s.Topics, 2)
	require.Equal(t, "mail", s.Topics[0].Topic, "the earliest due first")
	require.Equal(t, int64(1), s.Topics[0].Overdue)
	require.Equal(t, int64(3), s.Topics[1].Waiting)

	out, err = status("--max-overdue", "10m")
	require.NoError(t, err)
	require.Regexp(t, `\nscheduled events:    4 waiting, 2 cancelled\n  OVERDUE: 1 due and not sent yet, the earliest due \S+Z \(2m\d+\.\d+s ago\)`, out)
	require.Regexp(t, `\n  mail: 1, the next due \S+Z, 1 overdue\n  orders: 3, the next due \S+Z\n`, out)

	// Another table name: none there, nothing shown, no error.
	out, err = status("--scheduled-table", "billing_scheduled")
	require.NoError(t, err)
	require.NotContains(t, out, "scheduled events:")
	out, err = status("--json", "--scheduled-table", "billing_scheduled")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.False(t, st.Scheduled.Table)
	require.Zero(t, st.Scheduled.Waiting)
	require.Nil(t, st.Scheduled.NextDue)
}
