package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// insertBrokenRow writes, by hand, a row of topic "orders" whose headers
// are not a JSON object: no broker can take it. It returns its event id.
func insertBrokenRow(t *testing.T, b *emitBundle, aggregateID string) string {
	t.Helper()
	id := uuid.NewString()
	_, err := b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, headers) VALUES ($1, 'order.paid', 2, 'orders', 'Order', $2, '{"order_id": 1}', '"not an object"')`,
		id, aggregateID)
	require.NoError(t, err)
	return id
}

// pingedPoisonPublisher answers Ping, as a broker that is up does: each
// refusal counts as an attempt however loaded the machine (see
// failingPublisher).
type pingedPoisonPublisher struct{ poisonPublisher }

func (pingedPoisonPublisher) Ping(context.Context) error { return nil }

// requireDeadLettersLogged checks that each of the relay's dead letters in
// b's table was logged once, at error, with its event id, the relay
// (relayName), the path, its topic and its reason, and that nothing else
// was logged as a dead letter. It returns how many there are. A relayName
// ending in "/" is the fast path's RelayID: its member names start with
// it (a member that lost its liveness lock rejoins under a new name).
func requireDeadLettersLogged(t *testing.T, b *emitBundle, logs *captureLogs, path relay.Path, relayName string) int {
	t.Helper()
	type letter struct{ topic, reason string }
	stored := map[string]letter{}
	rows, err := b.db.DB.Query(`SELECT event_id::text, topic, reason FROM outbox_dead_letters WHERE source = 'relay'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		var l letter
		require.NoError(t, rows.Scan(&id, &l.topic, &l.reason))
		stored[id] = l
	}
	require.NoError(t, rows.Err())

	logs.mu.Lock()
	defer logs.mu.Unlock()
	logged := map[string]int{}
	for _, m := range logs.msgs {
		if m.Msg != relay.DeadLetteredLog {
			continue
		}
		id, _ := m.Fields["event_id"].(string)
		logged[id]++
		l, ok := stored[id]
		require.True(t, ok, "logged as a dead letter, but not in the dead-letter table: event %q (%v)", id, m.Fields)
		require.Equal(t, watermill.ErrorLogLevel, m.Level, "the dead letter of event %s is logged below error", id)
		if name, _ := m.Fields["relay"].(string); strings.HasSuffix(relayName, "/") {
			require.True(t, strings.HasPrefix(name, relayName), "the relay of event %s's dead letter is %q, want %s...", id, name, relayName)
		} else {
			require.Equal(t, relayName, m.Fields["relay"], "the relay of event %s's dead letter", id)
		}
		require.Equal(t, string(path), m.Fields["path"], "the path of event %s's dead letter", id)
		require.Equal(t, l.topic, m.Fields["topic"], "the topic of event %s's dead letter", id)
		require.NotNil(t, m.Err, "the dead letter of event %s is logged without its reason", id)
		// The WAL path adds to the stored reason when the row was gone.
		require.True(t, strings.HasPrefix(l.reason, m.Err.Error()),
			"event %s: logged reason %q, stored %q", id, m.Err.Error(), l.reason)
		require.NotEmpty(t, m.Err.Error(), "event %s: empty reason", id)
	}
	for id := range stored {
		require.Equal(t, 1, logged[id], "the dead letter of event %s is logged %d times, want once", id, logged[id])
	}
	return len(stored)
}

// Each row the fast path sets aside, a malformed one at once, one the
// broker refuses for good and one after its attempts, is logged once at
// error with its event id, the relay and the reason.
func TestFastPathLogsEachDeadLetter(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrders(t, b.client, 12, 3, 0)
	poison, permanent := want.perAggregate["order-1"][1], want.perAggregate["order-2"][2]
	for _, id := range []string{poison, permanent} {
		delete(want.ids, id)
	}
	insertBrokenRow(t, b, "order-x")
	logs := newCaptureLogs()
	relayID := "logs-" + uuid.NewString()[:8]
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Logger: logs,
		Publisher:   pingedPoisonPublisher{poisonPublisher{Publisher: pubsub, poison: poison, permanent: permanent}},
		MaxAttempts: 3, Fast: relay.FastConfig{RelayID: relayID}})
	cfg.RetryInterval = 10 * time.Millisecond
	stop := runRelay(t, cfg)
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 3)
	require.NoError(t, stop())

	require.Equal(t, 3, requireDeadLettersLogged(t, b, logs, relay.PathFast, relayID+"/"))
}

// The WAL path logs each row it sets aside, malformed or refused after its
// attempts, once at error with its event id, the slot and the reason.
func TestWALPathLogsEachDeadLetter(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	poison := uuid.NewString()
	logs := newCaptureLogs()
	stop := runRelay(t, s.config(relay.Config{Publisher: failingPublisher{pubsub, poison}, Logger: logs,
		MaxAttempts: 3, RetryInterval: 10 * time.Millisecond}))
	waitStreaming(t, s)
	_, err := s.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
		payload, headers) VALUES ($1, 'order.paid', 1, 'orders', 'Order', 'order-p', '{}', '{}')`, poison)
	require.NoError(t, err)
	insertBrokenRow(t, s.emitBundle, "order-m")
	want := emitOrders(t, s.client, 12, 3, 0)
	got.waitFor(t, want, patience)
	waitDelivered(t, s.emitBundle, 2)
	require.NoError(t, stop())
	require.Equal(t, 2, requireDeadLettersLogged(t, s.emitBundle, logs, relay.PathWAL, s.slot))
}

// The compatible path logs the row it sets aside once at error with its
// event id, the consumer group and the reason.
func TestCompatiblePathLogsEachDeadLetter(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrders(t, b.client, 4, 2, 0)
	insertBrokenRow(t, b, "order-x")
	logs := newCaptureLogs()
	group := "logs_" + uuid.NewString()[:8]
	stop := runRelay(t, quick(relay.PathCompatible, relay.Config{DB: b.db.DB, Publisher: pubsub, Logger: logs,
		Compatible: relay.CompatibleConfig{ConsumerGroup: group}}))
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 1)
	require.NoError(t, stop())
	require.Equal(t, 1, requireDeadLettersLogged(t, b, logs, relay.PathCompatible, group))
}
