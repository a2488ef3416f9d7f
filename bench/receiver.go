package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entoutbox/entoutbox/events"
)

// receiver records when each event id first arrives on the topic's subjects
// through a plain NATS subscription: no acks, so the bench's own consumer
// neither limits a drain nor adds latency. JetStream publishes are ordinary
// publishes on the subject, so it sees every message the relays publish.
type receiver struct {
	nc        *nats.Conn
	sub       *nats.Subscription
	brokerURL string
	topic     string

	mu         sync.Mutex
	got        map[string]time.Time
	deliverAt  map[string]string // the outbox_deliver_at header of scheduled events, unparsed
	duplicates int
	waiting    map[string]struct{} // ids await still expects
	allThere   chan struct{}       // closed when waiting empties
}

func newReceiver(_ context.Context, brokerURL, topic string) (*receiver, error) {
	nc, err := nats.Connect(natsURL(brokerURL), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("receiver: connecting to NATS: %w", err)
	}
	r := &receiver{nc: nc, brokerURL: brokerURL, topic: topic, got: make(map[string]time.Time), deliverAt: make(map[string]string)}
	// The event id is the Watermill UUID; Nats-Msg-Id is the publish id
	// (event id and row id), which a retry or replay changes.
	// T.*: the topic's partition subjects (T.~0, T.~1...), where the
	// relay's messages go on a topic split by aggregate.
	r.sub, err = nc.Subscribe(topic+".*", func(m *nats.Msg) {
		r.record(m.Header.Get(wmnats.WatermillUUIDHdr), m.Header.Get(events.MetaDeliverAt), time.Now())
	})
	if err == nil {
		err = r.sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("receiver: subscribing to %s: %w", topic, err)
	}
	return r, nil
}

// natsURL drops broker options such as ?ack_wait=, which are not for nats.Connect.
func natsURL(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		u.RawQuery = ""
		return u.String()
	}
	return rawURL
}

// record notes the first arrival of id at at, and the time it was due
// when it is a scheduled event ("" otherwise).
func (r *receiver) record(id, deliverAt string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.got[id]; seen {
		r.duplicates++ // at least once: a relay may publish again
		return
	}
	r.got[id] = at
	if deliverAt != "" {
		r.deliverAt[id] = deliverAt
	}
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

// deliverAtOf returns the outbox_deliver_at header id arrived with, "" for
// none.
func (r *receiver) deliverAtOf(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deliverAt[id]
}

func (r *receiver) duplicateCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.duplicates
}

// count is how many distinct events arrived.
func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// close stops consuming and deletes the topic's stream so that runs leave
// nothing behind on the server.
func (r *receiver) close() {
	_ = r.sub.Unsubscribe()
	r.nc.Close()
	deleteNATSStream(r.brokerURL, r.topic)
}

// deleteNATSStream deletes the stream that carries topic; best effort.
func deleteNATSStream(rawURL, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(natsURL(rawURL), nats.Timeout(5*time.Second))
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
