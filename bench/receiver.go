package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entoutbox/entoutbox/relay/broker"
)

// subscribers is how many members the bench's consumer group has. Each
// acks synchronously, one message at a time; several keep the bench's own
// consumer from being what limits a fast relay's drain rate.
const subscribers = 4

// receiver consumes one topic through the broker package, as an
// application would, and records when each event id first arrived.
type receiver struct {
	b         broker.Broker
	brokerURL string
	topic     string
	ctx       context.Context // ends consumption
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu         sync.Mutex
	got        map[string]time.Time
	duplicates int
	waiting    map[string]struct{} // ids await still expects
	allThere   chan struct{}       // closed when waiting empties
}

func newReceiver(ctx context.Context, brokerURL, topic string) (_ *receiver, err error) {
	b, err := broker.Open(ctx, brokerURL, broker.Options{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &receiver{b: b, brokerURL: brokerURL, topic: topic, ctx: ctx, cancel: cancel, got: make(map[string]time.Time)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	for range subscribers {
		sub, err := b.Subscriber("bench")
		if err != nil {
			return nil, err
		}
		msgs, err := sub.Subscribe(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("subscribing to %s: %w", topic, err)
		}
		r.wg.Go(func() { r.consume(msgs) })
	}
	return r, nil
}

func (r *receiver) consume(msgs <-chan *message.Message) {
	for {
		select {
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			r.record(msg.UUID, time.Now())
			msg.Ack()
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *receiver) record(id string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.got[id]; seen {
		r.duplicates++ // at least once: a relay may publish again
		return
	}
	r.got[id] = at
	if _, ok := r.waiting[id]; ok {
		delete(r.waiting, id)
		if len(r.waiting) == 0 {
			close(r.allThere)
		}
	}
}

// await waits until every id has arrived, abort is closed, or timeout
// passes, and returns how many have not arrived.
func (r *receiver) await(ctx context.Context, ids []string, timeout time.Duration, abort <-chan struct{}) int {
	r.mu.Lock()
	r.waiting = make(map[string]struct{})
	for _, id := range ids {
		if _, ok := r.got[id]; !ok {
			r.waiting[id] = struct{}{}
		}
	}
	done := make(chan struct{})
	r.allThere = done
	if len(r.waiting) == 0 {
		close(done)
	}
	r.mu.Unlock()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-abort:
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := len(r.waiting)
	r.waiting = nil
	return missing
}

// receivedAt returns when id first arrived.
func (r *receiver) receivedAt(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.got[id]
	return t, ok
}

func (r *receiver) duplicateCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.duplicates
}

// close stops consuming and, on NATS, deletes the topic's stream (with the
// bench's consumers) so that runs leave nothing behind on the server.
func (r *receiver) close() {
	r.cancel()
	r.wg.Wait()
	_ = r.b.Close()
	if r.b.Scheme() == "nats" {
		deleteNATSStream(r.brokerURL, r.topic)
	}
}

// deleteNATSStream deletes the stream that carries topic; best effort.
func deleteNATSStream(rawURL, topic string) {
	if u, err := url.Parse(rawURL); err == nil {
		u.RawQuery = "" // broker options such as ?ack_wait= are not for nats.Connect
		rawURL = u.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(rawURL, nats.Timeout(5*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	if name, err := js.StreamNameBySubject(ctx, topic); err == nil && strings.Contains(name, "bench_") {
		_ = js.DeleteStream(ctx, name)
	}
}

// receiverCeiling publishes n messages of payloadSize bytes straight to a
// scratch topic, then times how fast a fresh receiver takes them: the most a
// drain can show, whatever the relay, on this machine and broker.
func receiverCeiling(ctx context.Context, brokerURL, topic string, n int) (float64, error) {
	b, err := broker.Open(ctx, brokerURL, broker.Options{})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	body := make([]byte, payloadSize)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	const publishers = 4
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < n; i += publishers {
				if err := b.Publisher().Publish(topic, message.NewMessage(ids[i], body)); err != nil {
					errs <- fmt.Errorf("publishing to %s: %w", topic, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	start := time.Now()
	r, err := newReceiver(ctx, brokerURL, topic)
	if err != nil {
		return 0, err
	}
	defer r.close()
	if missing := r.await(ctx, ids, time.Minute, nil); missing > 0 {
		return 0, fmt.Errorf("%d of %d messages did not arrive", missing, n)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
