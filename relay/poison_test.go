package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// failingPublisher refuses one event, always, like a broker that rejects it.
type failingPublisher struct {
	message.Publisher
	poison string
}

func (p failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == p.poison {
			return errors.New("message rejected by the broker")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A row that always fails to publish goes to the dead letters after the
// bound, and the other aggregates flow meanwhile.
func TestPoisonRowIsDeadLetteredWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1000, Persistent: true, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)

	want := emitOrders(t, b.client, 60, 6, 0)
	var poison string
	for id := range want.ids {
		poison = id
		break
	}
	delete(want.ids, poison)
	for agg, ids := range want.perAggregate {
		for i, id := range ids {
			if id == poison {
				want.perAggregate[agg] = append(ids[:i:i], ids[i+1:]...)
			}
		}
	}
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: failingPublisher{pubsub, poison}, MaxAttempts: 4})
	cfg.RetryInterval = 10 * time.Millisecond
	stop := runRelay(t, cfg)
	got.waitFor(t, want, 20*time.Second)
	waitDelivered(t, b, 1)
	require.NoError(t, stop())
	got.requireExactly(t, want) // the poison's own aggregate goes on after it, in order

	var reason, eventID string
	var attempts int
	require.NoError(t, b.db.DB.QueryRow(`SELECT event_id, reason, attempts FROM outbox_dead_letters`).Scan(&eventID, &reason, &attempts))
	require.Equal(t, poison, eventID)
	require.Equal(t, "message rejected by the broker (after 4 attempts)", reason)
	require.Equal(t, 4, attempts)
}
