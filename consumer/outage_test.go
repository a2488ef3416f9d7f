package consumer_test

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// setupPrivate is setup on a private server, which the test may stop.
func setupPrivate(t *testing.T) (*pgtest.Private, *bundle) {
	t.Helper()
	p := pgtest.StartPrivate(t)
	db := p.Open(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	pgtest.Migrate(t, client.Schema.Create)
	return p, &bundle{db: &pgtest.DB{URL: p.URL, DB: db}, client: client}
}

// logged returns what l logged with message msg.
func (l *captureLogger) logged(msg string) []watermill.CapturedMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []watermill.CapturedMessage
	for _, m := range l.msgs {
		if m.Msg == msg {
			out = append(out, m)
		}
	}
	return out
}

// waitLogged waits until l logged msg, for up to a minute.
func (l *captureLogger) waitLogged(t *testing.T, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.logged(msg)) > 0 }, time.Minute, 20*time.Millisecond, "logged %q", msg)
}

// A database that cannot be reached is waited out: a delivery whose
// handler met the outage (its own ent call failed, and it wrapped the
// error), or that arrives during it, counts no attempt and writes no dead
// letter; the instance says once that it pauses and once that it resumes;
// a delivery that waited longer than its hold is nacked with an
// *OutageError, for the broker to deliver again. A handler's own network
// error while the database answers is the handler's: it counts, up to the
// dead letters.
func TestDatabaseOutageIsWaitedOutNotDeadLettered(t *testing.T) {
	t.Parallel()
	p, b := setupPrivate(t)
	ctx := context.Background()
	logs := &captureLogger{}
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(1), consumer.WithLogger(logs),
		consumer.WithOutagePauses(time.Minute, 100*time.Millisecond))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		if calls++; calls == 1 {
			close(entered)
			<-release // the server stops meanwhile
		}
		if err := tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx); err != nil {
			return fmt.Errorf("billing order %d: %w", e.OrderID, err)
		}
		return nil
	})

	// The server stops while the handler runs: its write fails.
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 100}, "1")
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, "billing", msg) }()
	<-entered
	p.Stop(t, "immediate")
	close(release)
	logs.waitLogged(t, consumer.PausedLog)
	select {
	case err := <-done:
		t.Fatalf("the delivery ended in the outage instead of waiting it out: %v", err)
	case <-time.After(time.Second):
	}
	p.Start(t)
	select {
	case err := <-done:
		require.NoError(t, err, "handled once the database is back")
	case <-time.After(2 * time.Minute):
		t.Fatal("the delivery did not resume")
	}
	logs.waitLogged(t, consumer.ResumedLog)
	require.Equal(t, 1, b.invoices(t, "billing"))
	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx), "no dead letter for an outage")
	require.Equal(t, 1, b.client.ProcessedEvent.Query().OnlyX(ctx).Attempts, "the outage counted no attempt")
	paused := logs.logged(consumer.PausedLog)
	require.Len(t, paused, 1, "one line at pause")
	require.ErrorContains(t, paused[0].Err, "billing order 1", "the line at pause says what met the outage")
	require.Len(t, logs.logged(consumer.ResumedLog), 1, "one line at resume")

	// A delivery arriving during an outage waits its hold, then is nacked.
	short := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(1), consumer.WithLogger(logs),
		consumer.WithOutagePauses(500*time.Millisecond, 100*time.Millisecond))...)
	short.OnOrderPaid("billing", invoiceHandlerOnly)
	p.Stop(t, "immediate")
	during := outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 100}, "2")
	err := short.Handle(ctx, "billing", during)
	var outage *consumer.OutageError
	require.ErrorAs(t, err, &outage, "nacked for the broker to deliver again")
	p.Start(t)
	require.NoError(t, short.Handle(ctx, "billing", during.Copy()), "the redelivery is handled")
	require.Equal(t, 2, b.invoices(t, "billing"))
	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))

	// The handler's own network error while the database answers counts.
	mine := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2), consumer.WithLogger(logs))...)
	mine.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return fmt.Errorf("calling the payment API: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	})
	require.NoError(t, mine.Handle(ctx, "billing", outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 100}, "3")))
	dl := b.client.DeadLetter.Query().OnlyX(ctx)
	require.Equal(t, 2, dl.Attempts)
	require.Contains(t, dl.Reason, "calling the payment API")
}

func invoiceHandlerOnly(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
	return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
		SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
}
