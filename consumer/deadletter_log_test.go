package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// captureLogger records what a handler set logs.
type captureLogger struct {
	mu   sync.Mutex
	msgs []watermill.CapturedMessage
}

func (l *captureLogger) log(level watermill.LogLevel, msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, watermill.CapturedMessage{Level: level, Msg: msg, Err: err, Fields: fields})
}

func (l *captureLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.log(watermill.ErrorLogLevel, msg, err, fields)
}
func (l *captureLogger) Info(msg string, fields watermill.LogFields) {
	l.log(watermill.InfoLogLevel, msg, nil, fields)
}
func (l *captureLogger) Debug(msg string, fields watermill.LogFields) {
	l.log(watermill.DebugLogLevel, msg, nil, fields)
}
func (l *captureLogger) Trace(msg string, fields watermill.LogFields) {
	l.log(watermill.TraceLogLevel, msg, nil, fields)
}
func (l *captureLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// Every kind of dead letter (a handler that keeps failing, a newer
// version, an unknown event, a payload that does not decode, a message
// without an event id), read from a topic through a router, is logged
// once, at error, with the event id, the consumer, the topic and the
// reason it is stored with.
func TestDeadLettersAreLoggedOnceAtError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &captureLogger{}
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2), consumer.WithLogger(logs))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return errors.New("order is cursed")
	})
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(router, func(string) (message.Subscriber, error) { return pubsub, nil }))
	runRouter(t, router)

	failing := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1")
	v3 := outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 5}, "2")
	v3.Metadata.Set(events.MetaEventVersion, "3")
	unknown := outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 5}, "3")
	unknown.Metadata.Set(events.MetaEventName, "order.refunded")
	garbage := outboxtest.Message(t, testent.OrderPaid{OrderID: 4, AmountCents: 5}, "4")
	garbage.Payload = []byte("not json")
	noID := outboxtest.Message(t, testent.OrderPaid{OrderID: 5, AmountCents: 5}, "5")
	noID.UUID = "not-a-uuid"
	sent := map[string]*message.Message{} // by aggregate id
	for _, msg := range []*message.Message{failing, v3, unknown, garbage, noID} {
		sent[msg.Metadata.Get(events.MetaAggregateID)] = msg
		require.NoError(t, pubsub.Publish("orders", msg))
	}
	require.Eventually(t, func() bool { return b.client.DeadLetter.Query().CountX(ctx) == len(sent) },
		patience, 10*time.Millisecond, "not every message reached the dead letters")
	// A letter is logged just after its row commits: wait for the lines too.
	logged := map[string][]watermill.CapturedMessage{} // by aggregate id
	require.Eventually(t, func() bool {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		clear(logged)
		for _, m := range logs.msgs {
			if m.Msg == consumer.DeadLetteredLog {
				id, _ := m.Fields["aggregate_id"].(string)
				logged[id] = append(logged[id], m)
			}
		}
		return len(logged) >= len(sent)
	}, patience, 10*time.Millisecond, "not every dead letter was logged")
	for _, dl := range b.client.DeadLetter.Query().AllX(ctx) {
		agg := dl.AggregateID
		require.Len(t, logged[agg], 1, "the dead letter of aggregate %s is logged %d times, want once", agg, len(logged[agg]))
		m := logged[agg][0]
		require.Equal(t, watermill.ErrorLogLevel, m.Level, "the dead letter of %s is logged below error", agg)
		require.Equal(t, sent[agg].UUID, m.Fields["event_id"], "event id of %s", agg)
		require.Equal(t, "billing", m.Fields["consumer"], "consumer of %s", agg)
		require.Equal(t, "orders", m.Fields["topic"], "topic of %s", agg)
		require.NotNil(t, m.Err, "the dead letter of %s is logged without its reason", agg)
		require.Equal(t, dl.Reason, m.Err.Error(), "reason of %s", agg)
		if agg == "1" {
			require.Equal(t, "order is cursed", dl.Reason)
		}
	}
}

// A handler set given no logger logs through slog.Default(): a user who
// configured nothing still sees its dead letters and retries.
// WithLogger(watermill.NopLogger{}) silences it. (Not parallel: it
// replaces the process's default logger while it runs.)
func TestHandlerSetLogsThroughSlogDefault(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	var buf bytes.Buffer
	records := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		var out []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var r map[string]any
			require.NoError(t, json.Unmarshal(line, &r), "%s", line)
			out = append(out, r)
		}
		return out
	}
	old, oldOut, oldFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil)))
	t.Cleanup(func() { // SetDefault also redirects the log package
		slog.SetDefault(old)
		log.SetOutput(oldOut)
		log.SetFlags(oldFlags)
	})

	cursed := func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return errors.New("order is cursed")
	}
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2))...)
	h.OnOrderPaid("billing", cursed)
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1")
	require.NoError(t, h.Handle(ctx, "billing", msg))
	var retries, letters int
	for _, r := range records() {
		switch r["msg"] {
		case "Handler failed, retrying":
			retries++
			require.Equal(t, "INFO", r["level"])
		case consumer.DeadLetteredLog:
			letters++
			require.Equal(t, "ERROR", r["level"])
			require.Equal(t, msg.UUID, r["event_id"])
			require.Equal(t, "billing", r["consumer"])
			require.Equal(t, "orders", r["topic"])
			require.Equal(t, "order is cursed", r["error"])
		}
	}
	require.Equal(t, 1, retries, "the retry is not logged through slog.Default(): %v", records())
	require.Equal(t, 1, letters, "the dead letter is not logged once through slog.Default(): %v", records())

	silent := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2),
		consumer.WithLogger(watermill.NopLogger{}))...)
	silent.OnOrderPaid("audit", cursed)
	before := len(records())
	require.NoError(t, silent.Handle(ctx, "audit", msg))
	require.Equal(t, 2, b.client.DeadLetter.Query().CountX(ctx), "both consumers set the event aside")
	require.Len(t, records(), before, "WithLogger(watermill.NopLogger{}) still logged")
}

// lockedWriter writes to w under mu, so the test reads what was logged
// without a race.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
