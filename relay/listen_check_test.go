package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay"
)

const (
	lostNotificationsLog     = "Notifications sent through the database do not arrive on the LISTEN connection"
	arrivingNotificationsLog = "Notifications arrive on the LISTEN connection"
)

// logsStarting are the messages logged at level that start with prefix.
func logsStarting(l *captureLogs, level watermill.LogLevel, prefix string) []watermill.CapturedMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []watermill.CapturedMessage
	for _, m := range l.msgs {
		if m.Level == level && strings.HasPrefix(m.Msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// ListenDB reaches a database the writes' notifications do not reach: the
// subscriber says so at start, naming the fix, and delivers by polling.
func TestListenCheckDetectsLostNotifications(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	logs := newCaptureLogs()
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{ListenDB: pgtest.OtherDatabase(t), PollOnly: true,
		PollInterval: 200 * time.Millisecond, Logger: logs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)

	require.Eventually(t, func() bool { return len(logsStarting(logs, watermill.ErrorLogLevel, lostNotificationsLog)) == 1 },
		patience, 20*time.Millisecond, "the lost notifications were not reported")
	msg := logsStarting(logs, watermill.ErrorLogLevel, lostNotificationsLog)[0].Msg
	require.Contains(t, msg, "--listen-database-url")
	require.Empty(t, logsStarting(logs, watermill.DebugLogLevel, arrivingNotificationsLog))

	want := emitOrdersAs(t, b.client, "polled", 20, 4, 0)
	got.waitFor(t, want, patience)
	got.requireExactly(t, want)
}

// Behind a pooler in transaction mode (PollOnly) with ListenDB a direct
// connection to the same database: the check passes, nothing is reported,
// and rows are woken by their notification: each arrives within seconds
// (polling, every minute, is far too slow, and the rescan is made as slow).
func TestListenDBDeliversNotificationsWithPollOnly(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	listen, err := pgschema.Open(b.db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { listen.Close() })
	logs := newCaptureLogs()
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{ListenDB: listen, PollOnly: true,
		PollInterval: time.Minute, Logger: logs})
	require.NoError(t, err)
	relay.SetRescanEvery(sub, 10*time.Minute)
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)

	require.Eventually(t, func() bool { return len(logsStarting(logs, watermill.DebugLogLevel, arrivingNotificationsLog)) == 1 },
		patience, 20*time.Millisecond, "the check did not see its notification")
	require.Empty(t, logsStarting(logs, watermill.ErrorLogLevel, lostNotificationsLog))
	for i := range 5 {
		want := emitOrdersAs(t, b.client, "woken", 1, 1, 0)
		sent := time.Now()
		got.waitFor(t, want, patience)
		require.Less(t, time.Since(sent), 20*time.Second, "row %d was not woken by its notification", i)
	}
}
