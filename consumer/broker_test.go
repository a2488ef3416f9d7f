package consumer_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// natsURL redelivers unacked messages after 2 s instead of 30 s; each
// subscriber holds 3 messages at once, the order test's WithConcurrency(3)
// (ENTOUTBOX_ORDER_NATS_IN_FLIGHT runs that test with more).
const natsURL = "nats://127.0.0.1:4222?ack_wait=2s&max_in_flight=3"

// patience bounds each wait for what a broker, a relay or PostgreSQL will
// do (a delivery, a dead letter, a start or stop): a liveness bound, not a
// speed limit. A passing test waits only as long as the work takes; on a
// loaded 2-core machine that is ten times as long as on an idle one.
const patience = 3 * time.Minute

func uniquePrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + "_"
}

func openNATS(t *testing.T) broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	br, err := broker.Open(ctx, natsURL, broker.Options{})
	if err != nil {
		pgtest.Unavailable(t, "NATS JetStream at "+natsURL, err)
	}
	t.Cleanup(func() { _ = br.Close() })
	return br
}

// runRouter runs r until the test ends.
func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(patience):
		t.Fatal("router did not start")
	}
}

// The broker redelivers the same event five times (the first four
// deliveries are nacked after the handler committed): one effect.
func TestRealRedeliveryThroughTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := openNATS(t)
	prefix := uniquePrefix()
	var calls, deliveries atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithTopicPrefix(prefix))...)
	h.OnOrderPaid("billing", invoiceHandler(&calls))

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := next(msg)
			if err == nil && deliveries.Add(1) < 5 {
				return nil, errors.New("lost the ack") // the broker delivers again
			}
			return out, err
		}
	})
	require.NoError(t, h.AddToRouter(router, br.Subscriber))
	runRouter(t, router)

	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 21, AmountCents: 5}, "21")
	require.NoError(t, br.Publisher().Publish(prefix+"orders", msg))
	require.Eventually(t, func() bool { return deliveries.Load() >= 5 }, patience, 10*time.Millisecond)
	require.Equal(t, 1, b.invoices(t, "billing"))
	require.Equal(t, int64(1), calls.Load(), "redeliveries are skipped before the handler")
}

// The consumer process is killed (SIGKILL) after its transaction committed
// and before the broker got the ack: the redelivered event is skipped.
func TestKilledBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := openNATS(t)
	prefix := uniquePrefix()
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 31, AmountCents: 5}, "31")
	require.NoError(t, br.Publisher().Publish(prefix+"orders", msg))

	run := func(killAfterCommit bool) (lines []string, state *os.ProcessState) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "CHILD_DATABASE_URL="+b.db.URL, "CHILD_PREFIX="+prefix,
			fmt.Sprintf("CHILD_KILL_AFTER_COMMIT=%t", killAfterCommit))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if sc.Text() == "delivered "+msg.UUID && !killAfterCommit {
				break // the second run only needs to see the delivery through
			}
		}
		if !killAfterCommit {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		_ = cmd.Wait()
		return lines, cmd.ProcessState
	}

	lines, state := run(true)
	require.Equal(t, []string{"handler ran " + msg.UUID}, lines)
	require.Equal(t, syscall.SIGKILL, state.Sys().(syscall.WaitStatus).Signal(), "the child died by SIGKILL")
	require.Equal(t, 1, b.invoices(t, "billing"), "the effect committed before the kill")

	lines, _ = run(false)
	require.Equal(t, []string{"delivered " + msg.UUID}, lines, "redelivered, and the handler did not run again")
	require.Equal(t, 1, b.invoices(t, "billing"))
}

const childEnv = "ENTOUTBOX_CONSUMER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := m.Run()
	if n := consumer.FastCheckDisagreements(); n > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the fast schema check disagreed with the library %d times (see above)\n", n)
		code = 1
	}
	os.Exit(code)
}

// runChild is a consumer process: it handles OrderPaid for "billing",
// printing what happens; with CHILD_KILL_AFTER_COMMIT it kills itself with
// SIGKILL right after the handler's transaction committed, before the ack.
func runChild() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := pgschema.Open(os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	br, err := broker.Open(ctx, natsURL, broker.Options{})
	if err != nil {
		return err
	}
	defer br.Close()
	h := testent.NewOutboxHandlers(client, consumer.WithTopicPrefix(os.Getenv("CHILD_PREFIX")))
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		fmt.Printf("handler ran %s\n", m.EventID)
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	kill := os.Getenv("CHILD_KILL_AFTER_COMMIT") == "true"
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := next(msg)
			if err == nil && kill {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // committed, not acked
				select {}
			}
			fmt.Printf("delivered %s\n", msg.UUID)
			return out, err
		}
	})
	if err := h.AddToRouter(router, br.Subscriber); err != nil {
		return err
	}
	err = router.Run(ctx)
	if strings.Contains(fmt.Sprint(err), "context canceled") {
		return nil
	}
	return err
}
