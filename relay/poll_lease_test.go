package relay_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// countingPublisher counts what one relay published.
type countingPublisher struct {
	message.Publisher
	n atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	if err == nil {
		p.n.Add(int64(len(msgs)))
	}
	return err
}

// On SQLite one relay relays at a time: a second one on the same file
// waits, publishing nothing, while the first holds the outbox's lease, and
// takes over when it stops; every event arrives once, each aggregate in
// its order.
func TestPollRelaysOneAtATime(t *testing.T) {
	t.Parallel()
	b := setupEmitSQLite(t)
	pubsub, got := receiveInProcess(t, "orders")
	first, second := &countingPublisher{Publisher: pubsub}, &countingPublisher{Publisher: pubsub}

	stopFirst := runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: first}))
	before := emitOrders(t, b.client, 100, 5, 0)
	got.waitFor(t, before, patience)
	stopSecond := runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: second}))
	during := emitOrders(t, b.client, 100, 5, 0)
	got.waitFor(t, during, patience)
	time.Sleep(500 * time.Millisecond) // long enough for a second relay that does not wait to publish (not a bound on the first)
	require.Zero(t, second.n.Load(), "the second relay published while the first held the lease")

	require.NoError(t, stopFirst())
	after := emitOrders(t, b.client, 100, 5, 0)
	got.waitFor(t, after, patience)
	require.Positive(t, second.n.Load(), "the second relay did not take over")
	require.NoError(t, stopSecond())

	all := emitted{ids: map[string]bool{}, perAggregate: map[string][]string{}}
	for _, e := range []emitted{before, during, after} {
		for id := range e.ids {
			all.ids[id] = true
		}
		for agg, ids := range e.perAggregate {
			all.perAggregate[agg] = append(all.perAggregate[agg], ids...)
		}
	}
	got.requireExactly(t, all)
}
