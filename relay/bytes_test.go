package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// bytesPublisher takes its time over each publish and notes what the relay
// held when it published the big row.
type bytesPublisher struct {
	r     **relay.Relay
	big   string
	delay time.Duration

	mu        sync.Mutex
	published map[string]int
	heldAtBig []int64
}

func (p *bytesPublisher) Publish(_ string, msgs ...*message.Message) error {
	time.Sleep(p.delay)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.published[m.UUID]++
		if m.UUID == p.big {
			now, _ := relay.BytesHeld(*p.r)
			p.heldAtBig = append(p.heldAtBig, now)
		}
	}
	return nil
}

func (p *bytesPublisher) Close() error { return nil }

// Rows of several MB drain with the bytes the relay holds (claimed, in
// flight, acked and not recorded) within MaxBytesInFlight; a row larger
// than the bound is held alone.
func TestRelayBoundsBytesInFlight(t *testing.T) {
	skipIfShort(t, "drains 200 MB of rows")
	t.Parallel()
	b := setupEmit(t)
	const (
		rows  = 40
		mb5   = 5 << 20
		bound = 16 << 20
		huge  = 24 << 20 // larger than the bound: sent alone
	)
	insert := func(n, size int) {
		_, err := b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload) SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', 'big-' || g || '-' || $2::int,
			('{"blob":"' || repeat('x', $2::int) || '"}')::jsonb FROM generate_series(1, $1::int) g`, n, size)
		require.NoError(t, err)
	}
	insert(rows/2, mb5)
	insert(1, huge)
	insert(rows/2, mb5)
	var big string
	require.NoError(t, b.db.DB.QueryRow(`SELECT event_id FROM outbox_events WHERE octet_length(payload::text) > $1`, huge).Scan(&big))

	var r *relay.Relay
	pub := &bytesPublisher{r: &r, big: big, delay: 20 * time.Millisecond, published: map[string]int{}}
	r, err := relay.New(quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pub,
		MaxBytesInFlight: bound}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := time.Now()
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	waitDelivered(t, b, 0)

	_, peak := relay.BytesHeld(r)
	t.Logf("drained in %s; held at most %.1f MiB of %d rows of 5 MiB and one of 24 MiB, bound %d MiB", time.Since(started).Round(time.Millisecond), float64(peak)/(1<<20), rows, bound>>20)
	require.LessOrEqual(t, peak, int64(huge+100), "more than the bound (or the one huge row) held at once")
	require.Greater(t, peak, int64(2*mb5), "the bound was not used: rows went one at a time")
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Len(t, pub.published, rows+1)
	require.NotEmpty(t, pub.heldAtBig)
	for _, held := range pub.heldAtBig {
		require.Less(t, held, int64(huge+100), "the huge row was not held alone")
	}
}
