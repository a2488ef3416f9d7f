package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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

// Ping answers, as a broker that refuses one message but is up does: each
// refusal counts as an attempt, however few other publishes succeed
// between them (without Ping, three failures in a row with no success
// between are taken for an outage, and stop counting).
func (failingPublisher) Ping(context.Context) error { return nil }

func (p failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == p.poison {
			return errors.New("message rejected by the broker")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A row that always fails to publish goes to the dead letters after the
// bound, and the other aggregates flow meanwhile (the paths that count
// attempts).
func TestPoisonRowIsDeadLetteredWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{relay.PathFast, relay.PathWAL, relay.PathPoll}, testPoisonRowIsDeadLettered)
}

func testPoisonRowIsDeadLettered(t *testing.T, p *onPath) {
	b := p.emitBundle
	pubsub, got := receiveInProcess(t, "orders")

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
	cfg := p.config(relay.Config{Publisher: failingPublisher{pubsub, poison}, MaxAttempts: 4})
	cfg.RetryInterval = 10 * time.Millisecond
	stop := runRelay(t, cfg)
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 1)
	require.NoError(t, stop())
	got.requireExactly(t, want) // the poison's own aggregate goes on after it, in order

	var reason, eventID string
	var attempts, left int
	require.NoError(t, b.sql.QueryRow(`SELECT event_id, reason, attempts FROM outbox_dead_letters`).Scan(&eventID, &reason, &attempts))
	require.Equal(t, poison, eventID)
	require.Equal(t, "message rejected by the broker (after 4 attempts)", reason)
	require.Equal(t, 4, attempts)
	require.NoError(t, b.sql.QueryRow(`SELECT count(*) FROM outbox_events WHERE event_id = $1`, poison).Scan(&left))
	require.Zero(t, left, "a dead-lettered row is moved out of the outbox")
}

// A failed publish is recorded on its row while it waits for a retry:
// attempts counts it and last_error says why, for whoever reads the outbox.
func TestFailedPublishRecordsAttemptsAndLastErrorOnTheRow(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100, Persistent: true, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	go consume(ctx, msgs, newReceived())

	want := emitOrders(t, b.client, 10, 2, 0)
	poison := want.perAggregate["order-1"][0]
	// A bound far away: the row keeps failing and stays in the outbox.
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: failingPublisher{pubsub, poison},
		MaxAttempts: 1000})
	cfg.RetryInterval = 10 * time.Millisecond
	stop := runRelay(t, cfg)

	var (
		attempts  int
		lastError string
	)
	require.Eventually(t, func() bool {
		require.NoError(t, b.db.DB.QueryRow(`SELECT attempts, coalesce(last_error, '') FROM outbox_events WHERE event_id = $1`,
			poison).Scan(&attempts, &lastError))
		return attempts >= 2
	}, patience, 20*time.Millisecond, "the failed publishes are not counted on the row")
	// The same statement counts the attempt and records the error.
	require.Equal(t, "message rejected by the broker", lastError, "last_error of the failing row")
	require.NoError(t, stop())
}

// flakyPublisher fails the first publishes of one event, then lets it
// through; before each try of it, it calls onTry with the try's number.
type flakyPublisher struct {
	message.Publisher
	event    string
	failures int
	onTry    func(try int)

	mu    sync.Mutex
	tries int
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID != p.event {
			continue
		}
		p.mu.Lock()
		p.tries++
		try := p.tries
		p.mu.Unlock()
		p.onTry(try)
		if try <= p.failures {
			return errors.New("broker briefly unavailable")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// An event whose publish fails twice and then succeeds holds back the
// later events of its aggregate, which follow it in order; the other
// aggregates do not wait for it: they arrive while it backs off.
func TestTransientFailureHoldsBackOnlyItsAggregateInOrder(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{relay.PathFast, relay.PathPoll}, func(t *testing.T, p *onPath) {
		b := p.emitBundle
		pubsub, got := receiveInProcess(t, "orders")

		want := emitOrders(t, b.client, 60, 6, 0)
		const slow = "order-1"
		flaky := want.perAggregate[slow][0] // the first row: the rest of its aggregate is behind it
		others := emitted{ids: map[string]bool{}}
		for agg, ids := range want.perAggregate {
			if agg != slow {
				for _, id := range ids {
					others.ids[id] = true
				}
			}
		}
		// The first retry comes a second after the first failure: ample time
		// for the other aggregates' 50 in-process publishes, unless they wait.
		var othersDuringBackoff, laterFirst atomic.Bool
		pub := &flakyPublisher{Publisher: pubsub, event: flaky, failures: 2, onTry: func(try int) {
			if try == 2 {
				othersDuringBackoff.Store(got.hasAll(others))
			}
			got.mu.Lock()
			defer got.mu.Unlock()
			if len(got.perAggregate[slow]) > 0 {
				laterFirst.Store(true)
			}
		}}
		cfg := p.config(relay.Config{Publisher: pub})
		cfg.RetryInterval = time.Second
		stop := runRelay(t, cfg)
		got.waitFor(t, want, patience)
		waitDelivered(t, b, 0)
		require.NoError(t, stop())

		pub.mu.Lock()
		require.Equal(t, 3, pub.tries, "the failing event is tried until it succeeds, then not again")
		pub.mu.Unlock()
		require.False(t, laterFirst.Load(), "a later event of the failing aggregate went out before it")
		require.True(t, othersDuringBackoff.Load(), "the other aggregates waited for the failing one")
		got.requireExactly(t, want) // the failing event included, first of its aggregate
	})
}
