package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/metrics"
)

func TestStatusJSONAndThresholds(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, testStatusJSONAndThresholds)
}

func testStatusJSONAndThresholds(t *testing.T, db statusDB) {
	client := db.client
	db.pending(t, "orders", 3, 90*time.Second, "")
	db.pending(t, "catalog", 1, 10*time.Second, "")
	addLetter(t, client, "billing", "the billing code has a bug", time.Now())
	addLetter(t, client, "billing", "the billing code has a bug", time.Now())
	addLetter(t, client, "relay", "publishing: connection refused", time.Now())
	discarded := addLetter(t, client, "audit", "disk full", time.Now())
	require.NoError(t, client.DeadLetter.UpdateOneID(discarded.ID).SetDiscardedAt(time.Now()).SetDiscardNote("x").Exec(context.Background()))
	var err error

	status := func(args ...string) (string, error) {
		return run(t, nil, append([]string{"status", "--database-url", db.URL}, args...)...)
	}
	out, err := status("--json")
	require.NoError(t, err)
	var st struct {
		Pending int64   `json:"pending"`
		Age     float64 `json:"oldest_pending_age_seconds"`
		Topics  []struct {
			Topic   string `json:"topic"`
			Pending int64  `json:"pending"`
		} `json:"topics"`
		DeadLetters struct {
			Open, Retried, Discarded int64
			BySource                 map[string]int64 `json:"by_source"`
			ByReason                 []struct {
				Source, Reason string
				Count          int64
			} `json:"by_reason"`
		} `json:"dead_letters"`
		Relays        []any    `json:"relays"`
		Problems      []string `json:"problems"`
		Database      string   `json:"database"`
		NotApplicable []string `json:"not_applicable"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, int64(4), st.Pending)
	// 90 s when written, and seconds more on a loaded machine.
	require.GreaterOrEqual(t, st.Age, 89.0)
	require.Less(t, st.Age, 120.0)
	require.Len(t, st.Topics, 2)
	require.Equal(t, "catalog", st.Topics[0].Topic)
	require.Equal(t, int64(1), st.Topics[0].Pending)
	require.Equal(t, "orders", st.Topics[1].Topic)
	require.Equal(t, int64(3), st.Topics[1].Pending)
	require.Equal(t, int64(3), st.DeadLetters.Open, "the discarded letter is not open")
	require.Equal(t, int64(1), st.DeadLetters.Discarded)
	require.Equal(t, map[string]int64{"billing": 2, "relay": 1}, st.DeadLetters.BySource)
	require.Len(t, st.DeadLetters.ByReason, 2)
	require.Equal(t, "relay", st.DeadLetters.ByReason[0].Source, "the relay's first")
	require.Equal(t, "the billing code has a bug", st.DeadLetters.ByReason[1].Reason)
	require.Equal(t, int64(2), st.DeadLetters.ByReason[1].Count)
	require.NotNil(t, st.Relays)
	require.Empty(t, st.Problems)
	if db.mysql {
		require.Equal(t, "MySQL", st.Database)
		require.Equal(t, []string{"fast relays (the fast path is PostgreSQL's; the poll relays share the outbox here)",
			"wal slots (the WAL path is PostgreSQL's)"}, st.NotApplicable)
	} else {
		require.Equal(t, "PostgreSQL", st.Database)
		require.NotNil(t, st.NotApplicable)
		require.Empty(t, st.NotApplicable)
	}

	out, err = status()
	require.NoError(t, err)
	require.Contains(t, out, "pending events:      4\n")
	require.Regexp(t, `\n  orders: 3, oldest 1m[3-5]\d`, out)
	require.Contains(t, out, "dead letters:        3\n  from relay: 1, 1 reason\n    1: publishing: connection refused\n"+
		"  from billing: 2, 1 reason\n    2: the billing code has a bug\n")
	require.Contains(t, out, "settled letters:     0 retried, 1 discarded\n")

	// Within the thresholds: exit 0.
	_, err = status("--max-age", "5m", "--max-dead-letters", "3")
	require.NoError(t, err)
	// Past each: an error (exit 1) saying which, after the status.
	out, err = status("--max-dead-letters", "2", "--json")
	require.EqualError(t, err, "status: 3 open dead letters, more than the maximum 2")
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, []string{"3 open dead letters, more than the maximum 2"}, st.Problems)
	out, err = status("--max-age", "1m")
	require.Error(t, err)
	require.Regexp(t, `^status: the oldest pending event has waited 1m[3-5]\d\.\d+s, more than the maximum age 1m0s$`, err.Error())
	require.Contains(t, out, "pending events:      4\n")
	_, err = status("--max-age", "1m", "--max-dead-letters", "0")
	require.ErrorContains(t, err, "more than the maximum age 1m0s; 3 open dead letters, more than the maximum 0")
}

// Aggregates a consumer holds behind a dead letter show in status, text and
// JSON, per consumer with the longest held first, and in the
// entoutbox_consumer_held_aggregates gauge; positions that hold nothing do
// not.
func TestStatusShowsHeldAggregates(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, testStatusShowsHeldAggregates)
}

func testStatusShowsHeldAggregates(t *testing.T, db statusDB) {
	db.position(t, "billing", "orders", "7", 4, uuid.MustParse("0190a3c2-0000-7000-8000-000000000005"), 2*time.Hour)
	db.position(t, "billing", "orders", "8", 1, uuid.MustParse("0190a3c2-0000-7000-8000-000000000002"), 3*time.Hour)
	db.position(t, "billing", "orders", "9", 12, uuid.Nil, 0)
	db.position(t, "audit", "orders", "7", 5, uuid.Nil, 0)

	out, err := run(t, nil, "status", "--database-url", db.URL, "--json")
	require.NoError(t, err)
	var st struct {
		Held []struct {
			Consumer string
			Count    int64
			Oldest   []struct {
				Topic         string
				AggregateType string `json:"aggregate_type"`
				AggregateID   string `json:"aggregate_id"`
				Seq           int64
				EventID       string `json:"event_id"`
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Held, 1, "only billing holds aggregates")
	h := st.Held[0]
	require.Equal(t, "billing", h.Consumer)
	require.Equal(t, int64(2), h.Count)
	require.Len(t, h.Oldest, 2)
	require.Equal(t, "8", h.Oldest[0].AggregateID, "the longest held first")
	require.Equal(t, int64(2), h.Oldest[0].Seq)
	require.Equal(t, "0190a3c2-0000-7000-8000-000000000002", h.Oldest[0].EventID)
	require.Equal(t, "7", h.Oldest[1].AggregateID)

	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "held aggregates:     2 by consumer billing")
	require.Contains(t, out, "entoutbox dead-letters list --consumer billing")
	// Seconds pass between the insert and the status on a loaded machine.
	require.Regexp(t, `\n  orders Order/8 behind event 0190a3c2-0000-7000-8000-000000000002 \(seq 2\), for 3h0m\d+s\n`, out)
	require.NotContains(t, out, "audit")

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_consumer_held_aggregates", "consumer", "billing"))
	db.exec(t, `UPDATE outbox_consumer_positions SET held_seq = NULL WHERE consumer = 'billing'`)
	require.Equal(t, 0.0, promtest.Value(t, reg, "entoutbox_consumer_held_aggregates", "consumer", "billing"),
		"a consumer that held aggregates reports 0 once they are released")
}

// Each consumer's lag per topic shows in status, text and JSON, and in the
// lag gauges: the events past its positions (aggregates without one count
// whole) and the age of the oldest; 0 once it handled everything; a
// consumer whose positions are gone drops out.
func TestStatusShowsConsumerLag(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, testStatusShowsConsumerLag)
}

func testStatusShowsConsumerLag(t *testing.T, db statusDB) {
	db.emitDated(t, "orders", "1", 5*time.Hour, 4*time.Hour, 3*time.Hour)
	db.emitDated(t, "orders", "2", time.Hour)
	db.position(t, "billing", "orders", "1", 1, uuid.Nil, 0)
	db.position(t, "audit", "orders", "1", 3, uuid.Nil, 0)
	db.position(t, "audit", "orders", "2", 1, uuid.Nil, 0)

	type lagJSON struct {
		Consumer, Topic string
		Events, Located int64
		Age             *float64 `json:"oldest_age_seconds"`
	}
	readJSON := func() map[string]lagJSON {
		t.Helper()
		out, err := run(t, nil, "status", "--database-url", db.URL, "--json")
		require.NoError(t, err)
		var st struct{ Lag []lagJSON }
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		m := map[string]lagJSON{}
		for _, l := range st.Lag {
			require.Equal(t, "orders", l.Topic)
			m[l.Consumer] = l
		}
		return m
	}
	lags := readJSON()
	require.Len(t, lags, 2)
	billing := lags["billing"]
	require.Equal(t, int64(3), billing.Events, "Order/1 seq 2 and 3, Order/2 (no position) seq 1")
	require.Equal(t, int64(3), billing.Located)
	require.NotNil(t, billing.Age)
	require.InDelta(t, (4 * time.Hour).Seconds(), *billing.Age, 60, "Order/1 seq 2")
	require.Equal(t, int64(0), lags["audit"].Events)
	require.NotNil(t, lags["audit"].Age)
	require.Zero(t, *lags["audit"].Age)

	out, err := run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "consumer lag:")
	require.Regexp(t, `\n  billing on orders: 3, the oldest written 4h0m\d+s ago\n`, out)
	require.Contains(t, out, "\n  audit on orders: 0\n")

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	gauge := func(name, consumer string) float64 {
		return promtest.Value(t, reg, name, "consumer", consumer, "topic", "orders")
	}
	require.Eventually(t, func() bool { return gauge("entoutbox_consumer_lag_events", "billing") == 3 }, patience, 10*time.Millisecond)
	require.NoError(t, m.BacklogError())
	require.InDelta(t, (4 * time.Hour).Seconds(), gauge("entoutbox_consumer_lag_oldest_seconds", "billing"), 60)
	require.True(t, promtest.Present(t, reg, "entoutbox_consumer_lag_events", "consumer", "audit", "topic", "orders"))
	require.True(t, promtest.Present(t, reg, "entoutbox_consumer_lag_oldest_seconds", "consumer", "audit", "topic", "orders"))
	require.Zero(t, gauge("entoutbox_consumer_lag_oldest_seconds", "audit"))

	// The first event behind deleted (a relay with --delete-delivered):
	// the age is of those left, and says so.
	db.exec(t, `DELETE FROM outbox_events WHERE aggregate_id = '1' AND aggregate_seq = 2`)
	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Regexp(t, `\n  billing on orders: 3, the oldest written at least 3h0m\d+s ago \(2 of them found`, out)
	require.Equal(t, int64(2), readJSON()["billing"].Located)
	db.exec(t, `DELETE FROM outbox_events`)
	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "\n  billing on orders: 3, the oldest's age unknown")
	require.Nil(t, readJSON()["billing"].Age, "unknown is null, not 0")

	// Everything handled: 0, not the last value. audit's positions gone:
	// its series go.
	db.exec(t, `UPDATE outbox_consumer_positions SET last_seq = 3 WHERE consumer = 'billing'`)
	db.position(t, "billing", "orders", "2", 1, uuid.Nil, 0)
	db.exec(t, `DELETE FROM outbox_consumer_positions WHERE consumer = 'audit'`)
	require.Eventually(t, func() bool {
		return !promtest.Present(t, reg, "entoutbox_consumer_lag_events", "consumer", "audit", "topic", "orders")
	}, patience, 10*time.Millisecond)
	require.Zero(t, gauge("entoutbox_consumer_lag_events", "billing"))
	require.True(t, promtest.Present(t, reg, "entoutbox_consumer_lag_oldest_seconds", "consumer", "billing", "topic", "orders"))
	require.Zero(t, gauge("entoutbox_consumer_lag_oldest_seconds", "billing"))
	require.False(t, promtest.Present(t, reg, "entoutbox_consumer_lag_oldest_seconds", "consumer", "audit"))
	lags = readJSON()
	require.Len(t, lags, 1)
	require.Equal(t, int64(0), lags["billing"].Events)
	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "\n  billing on orders: 0\n")
	require.NotContains(t, out, "audit")
}

// status groups the open dead letters by source, the relay's first, and
// by reason with ids and numbers replaced, in text and JSON: a cause
// shared by hundreds of letters naming their orders is one line, and a
// source with two letters is not hidden by one with hundreds.
func TestStatusGroupsDeadLettersBySourceAndReason(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, testStatusGroupsDeadLettersBySourceAndReason)
}

func testStatusGroupsDeadLettersBySourceAndReason(t *testing.T, db statusDB) {
	letter := func(source, reason string) {
		db.exec(t, `INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at) VALUES ($1, $2, $3, 1, `+
			db.now()+`)`, uuid.NewString(), source, reason)
	}
	for g := 1; g <= 200; g++ {
		letter("billing", fmt.Sprintf("decoding order %d: invalid character '%c' looking for beginning of value", g, 'a'+g%26))
	}
	for g := 1; g <= 25; g++ {
		letter("billing", fmt.Sprintf("cause %c: %s", 'a'+g, uuid.NewString()))
	}
	letter("relay", `invalid topic "Orders!"`)
	letter("relay", `invalid topic "Orders!"`)

	out, err := run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, `dead letters:        227
  from relay: 2, 1 reason
    2: invalid topic "…"
      e.g. invalid topic "Orders!"
  from billing: 225, 26 reasons
    200: decoding order <n>: invalid character '…' looking for beginning of value
      e.g. decoding order 200: invalid character 's' looking for beginning of value
    1: cause b: <uuid>
`)
	require.Contains(t, out, "    16 more in 16 other reasons (entoutbox dead-letters list --source billing)\n")

	out, err = run(t, nil, "status", "--database-url", db.URL, "--json")
	require.NoError(t, err)
	var st struct {
		DeadLetters struct {
			Sources []struct {
				Source        string
				Open, Reasons int64
			}
			ByReason []struct {
				Source, Reason, Example string
				Count                   int64
			} `json:"by_reason"`
		} `json:"dead_letters"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.DeadLetters.Sources, 2)
	require.Equal(t, "relay", st.DeadLetters.Sources[0].Source)
	require.Equal(t, int64(2), st.DeadLetters.Sources[0].Open)
	require.Equal(t, int64(26), st.DeadLetters.Sources[1].Reasons)
	require.Len(t, st.DeadLetters.ByReason, 11, "the relay's reason and ten of billing's")
	require.Equal(t, `invalid topic "…"`, st.DeadLetters.ByReason[0].Reason)
	require.Equal(t, int64(200), st.DeadLetters.ByReason[1].Count)
	require.Equal(t, "decoding order 200: invalid character 's' looking for beginning of value", st.DeadLetters.ByReason[1].Example)
}

// Pending rows whose last publish failed show in status with their error,
// per topic and on the fast relay holding them, in text and JSON.
func TestStatusShowsFailingRows(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, testStatusShowsFailingRows)
}

// The relay holding them is a fast relay on PostgreSQL, a poll relay on
// MySQL (where status names the fast path and the WAL slots as not
// applicable).
func testStatusShowsFailingRows(t *testing.T, db statusDB) {
	db.pending(t, "orders", 3, 0, "timeout waiting for ack from 127.0.0.1:4222")
	db.pending(t, "orders", 2, 0, "")
	db.leasePartition(t, "r1/a/1", time.Minute)

	out, err := run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Regexp(t, `\n  orders: 5, oldest \S+; 3 failing, last error: timeout waiting for ack from 127.0.0.1:4222\n`, out)
	require.Regexp(t, `\n  r1/a/1 owns 1 \(every topic\), lease until \S+; failing: timeout waiting for ack from 127.0.0.1:4222 `+
		`\(3 pending rows of its partitions failed last time\)\n`, out)
	if db.mysql {
		require.Contains(t, out, "\npoll relays:         1, sharing 1 partitions\n")
		require.Contains(t, out, "\nnot on MySQL:        fast relays (the fast path is PostgreSQL's; the poll relays share the outbox here)\n"+
			"                     wal slots (the WAL path is PostgreSQL's)\n")
	} else {
		require.Contains(t, out, "\nfast relays:         1, sharing 1 partitions\n")
		require.NotContains(t, out, "not on")
	}

	out, err = run(t, nil, "status", "--database-url", db.URL, "--json")
	require.NoError(t, err)
	var st struct {
		Topics []struct {
			Failing       int64
			LastError     string `json:"last_error"`
			LastErrorRows int64  `json:"last_error_rows"`
		}
		Relays []struct {
			Failing   int64
			LastError string `json:"last_error"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Topics, 1)
	require.Equal(t, int64(3), st.Topics[0].Failing)
	require.Equal(t, int64(3), st.Topics[0].LastErrorRows)
	require.Equal(t, "timeout waiting for ack from 127.0.0.1:4222", st.Topics[0].LastError)
	require.Len(t, st.Relays, 1)
	require.Equal(t, int64(3), st.Relays[0].Failing)
}
