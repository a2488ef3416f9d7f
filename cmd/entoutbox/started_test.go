package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/relay"
)

// "Relay started" is logged once the database and the broker answered and
// the relay runs, not before: with the broker cut off (behind a proxy the
// test cuts after connecting) the relay says what it waits for and not
// that it started; once the broker is back, it says it started.
func TestRelayStartedOnlyOnceTheBrokerAnswers(t *testing.T) {
	requireNATS(t)
	db := outboxDB(t)
	natsProxy := tcpproxy.Start(t, testNATS)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := broker.Open(ctx, "nats://"+natsProxy.Addr, broker.Options{})
	require.NoError(t, err)
	defer b.Close()
	r, err := relay.New(relay.Config{DB: db.DB, Publisher: b.Publisher()})
	require.NoError(t, err)
	natsProxy.Cut()

	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	logs := &syncBuffer{}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		logWhenReady(ctx, r.Ready, slog.New(slog.NewTextHandler(logs, nil)), newRedactor(), []any{"path", "fast"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "broker is not reachable") },
		patience, 50*time.Millisecond, "no line saying what the relay waits for; logs:\n%s", logs)
	require.NotContains(t, logs.String(), "Relay started")

	natsProxy.Restore()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `msg="Relay started" path=fast`) },
		patience, 50*time.Millisecond, "not started once the broker answered; logs:\n%s", logs)
	<-logged
	cancel()
	require.NoError(t, <-ran)
}
