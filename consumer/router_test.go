package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// AddToRouter subscribes WithConcurrency members of each consumer's group
// when the schema has positions; without them it subscribes one, as
// before, and says at error level that order is not kept across
// instances.
func TestConcurrencyNeedsPositionsAndSaysSo(t *testing.T) {
	t.Parallel()
	var made atomic.Int64
	newSubscriber := func(string) (message.Subscriber, error) {
		made.Add(1)
		return gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), nil
	}
	said := func(logs *captureLogger) (errs []string) {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, m := range logs.msgs {
			if m.Level == watermill.ErrorLogLevel && strings.Contains(m.Msg, "per-aggregate order") {
				errs = append(errs, m.Msg)
			}
		}
		return errs
	}

	ordered := &captureLogger{}
	h := testent.NewOutboxHandlers(setup(t).client, consumer.WithConcurrency(3), consumer.WithLogger(ordered))
	h.OnOrderPaid("billing", invoiceHandler(new(atomic.Int64)))
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(r, newSubscriber))
	require.Equal(t, int64(3), made.Load(), "three members of billing's group")
	require.Len(t, r.Handlers(), 3)
	require.Empty(t, said(ordered))

	made.Store(0)
	unordered := &captureLogger{}
	set := consumer.NewSet([]consumer.EventType{{Name: "order.paid", Topic: "orders", Latest: 1,
		Decode: func(int, []byte) (any, error) { return nil, nil }}},
		func(context.Context, consumer.DeadLetter) error { return nil }, consumer.WithConcurrency(3), consumer.WithLogger(unordered))
	require.NoError(t, set.Register("billing", "order.paid", func(context.Context, any, events.Meta) error { return nil }))
	r, err = message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, set.AddToRouter(r, newSubscriber))
	require.Equal(t, int64(1), made.Load(), "one subscriber without positions")
	require.Len(t, r.Handlers(), 1)
	require.Len(t, said(unordered), 1)
}

// manyInFlight is a subscriber that hands out many messages before the
// first is acknowledged.
type manyInFlight struct {
	*gochannel.GoChannel
	max *atomic.Int64
}

func (s manyInFlight) MaxInFlight() int    { return int(s.max.Load()) }
func (s manyInFlight) LimitInFlight(n int) { s.max.Store(int64(min(n, s.MaxInFlight()))) }

// A subscriber with many messages in flight of its own is subscribed once:
// more members would only hold more messages.
func TestOneSubscriberWithManyInFlightIsEnough(t *testing.T) {
	t.Parallel()
	var made atomic.Int64
	h := testent.NewOutboxHandlers(setup(t).client, consumer.WithConcurrency(3), consumer.WithLogger(watermill.NopLogger{}))
	h.OnOrderPaid("billing", invoiceHandler(new(atomic.Int64)))
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	inFlight := new(atomic.Int64)
	inFlight.Store(64)
	newSubscriber := func(string) (message.Subscriber, error) {
		made.Add(1)
		return manyInFlight{gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), inFlight}, nil
	}
	require.NoError(t, h.AddToRouter(r, newSubscriber))
	require.Equal(t, int64(1), made.Load())
	require.Len(t, r.Handlers(), 1)
	require.Equal(t, int64(64), inFlight.Load(), "positions keep the order of what is in flight")

	// Without positions nothing keeps the order but handling one at a
	// time: the subscriber is limited to 1.
	made.Store(0)
	set := consumer.NewSet([]consumer.EventType{{Name: "order.paid", Topic: "orders", Latest: 1,
		Decode: func(int, []byte) (any, error) { return nil, nil }}},
		func(context.Context, consumer.DeadLetter) error { return nil }, consumer.WithLogger(watermill.NopLogger{}))
	require.NoError(t, set.Register("billing", "order.paid", func(context.Context, any, events.Meta) error { return nil }))
	r, err = message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, set.AddToRouter(r, newSubscriber))
	require.Equal(t, int64(1), made.Load())
	require.Equal(t, int64(1), inFlight.Load(), "one message at a time without positions")
}
