package relay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// Two compatible relays of one outbox, in one consumer group, take turns
// under the group's lock while events are written: each event goes out
// once, each aggregate's in its order; on MariaDB both relays take part.
func TestCompatibleRelaysOfOneGroupTakeTurns(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{relay.PathCompatible, compatibleMariaDB}, func(t *testing.T, p *onPath) {
		pubsub, got := receiveInProcess(t, "orders")
		var relays [2]countingPublisher
		for i := range relays {
			relays[i].Publisher = pubsub
			runRelay(t, p.config(relay.Config{Publisher: &relays[i], BatchSize: 5}))
		}
		want := emitOrders(t, p.client, 200, 7, 0)
		got.waitFor(t, want, patience)
		waitDelivered(t, p.emitBundle, 0)
		got.requireExactly(t, want)
		t.Logf("published by each relay: %d, %d", relays[0].n.Load(), relays[1].n.Load())
		if !p.mysql {
			// A relay that waited for the lock fails to serialize its
			// read (REPEATABLE READ) and backs off: the other may do it
			// all.
			return
		}
		// InnoDB hands the lock to the relay waiting for it.
		for i := range relays {
			require.Positive(t, relays[i].n.Load(), "relay %d published nothing", i)
		}
	})
}
