package relay_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/relay"
)

// concurrencyPublisher publishes through its Publisher slowly, fails some
// publishes, and records the most publishes of one aggregate it saw under
// way at once, whichever relay made them.
type concurrencyPublisher struct {
	message.Publisher
	mu       sync.Mutex
	rng      *rand.Rand
	inflight map[string]int
	most     int
	worst    string
	failed   int
}

func newConcurrencyPublisher(pub message.Publisher) *concurrencyPublisher {
	return &concurrencyPublisher{Publisher: pub, rng: rand.New(rand.NewPCG(1, 2)), inflight: map[string]int{}}
}

func (p *concurrencyPublisher) Publish(topic string, msgs ...*message.Message) error {
	aggs := make([]string, len(msgs))
	p.mu.Lock()
	for i, m := range msgs {
		aggs[i] = m.Metadata.Get(events.MetaAggregateID)
		p.inflight[aggs[i]]++
		if n := p.inflight[aggs[i]]; n > p.most {
			p.most, p.worst = n, aggs[i]
		}
	}
	fail := p.rng.IntN(5) == 0
	pause := time.Duration(p.rng.IntN(3000)) * time.Microsecond
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, a := range aggs {
			p.inflight[a]--
		}
	}()
	time.Sleep(pause)
	if fail {
		p.mu.Lock()
		p.failed++
		p.mu.Unlock()
		return errors.New("refused by the test")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// Two relays publish many aggregates at once through a publisher that
// fails a fifth of the publishes (retries wait behind their backoff) while
// partitions change hands (the second relay joins, then leaves): never are
// two events of one aggregate published at the same time, and every event
// arrives, first seen in order.
func TestRelaysNeverPublishTwoEventsOfAnAggregateAtOnce(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	pub := newConcurrencyPublisher(pubsub)
	want := emitInOneTx(t, b.client, "busy", 1500, 30)
	start := func(id string) func() error {
		return runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pub,
			Concurrency: 64, Fast: relay.FastConfig{RelayID: id, Partitions: 8}}))
	}
	start("steady")
	require.Eventually(t, func() bool { return got.distinct() >= 100 }, patience, 10*time.Millisecond, "nothing arrived")
	stopVisitor := start("visitor")
	require.Eventually(t, func() bool { o := owners(t, b); return o[keyWithPrefix(o, "visitor/")] > 0 },
		patience, 10*time.Millisecond, "the second relay took no partition")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, stopVisitor())
	more := emitInOneTx(t, b.client, "after", 500, 30)
	want.add(more)

	// Until everything arrived, or two events of an aggregate were seen
	// under way at once.
	var most, failed int
	var worst string
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pub.mu.Lock()
		most, worst, failed = pub.most, pub.worst, pub.failed
		pub.mu.Unlock()
		if most > 1 || got.distinct() == len(want.ids) {
			break
		}
	}
	require.Equal(t, 1, most, "%d events of aggregate %s published at once", most, worst)
	got.waitFor(t, want, time.Second)
	require.Positive(t, failed, "no publish failed: the retries were not exercised")
	seen := got.firstSeen()
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, seen[agg], "order of aggregate %s", agg)
	}
}
