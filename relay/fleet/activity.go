package fleet

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// activity is when a tenant's relay last had something to relay: when it
// started, or last handed a message to the publisher.
type activity struct{ at atomic.Int64 }

func (a *activity) seen()                        { a.at.Store(time.Now().UnixNano()) }
func (a *activity) since() time.Duration         { return time.Since(time.Unix(0, a.at.Load())) }
func (a *activity) idleFor(d time.Duration) bool { return a.since() >= d }

// watchPublishes returns pub, recording a's activity on each publish. It
// has the optional methods pub has (Ping, PublishAsync, Scheme), and no
// other: the relay behaves as with pub itself.
func watchPublishes(pub message.Publisher, a *activity) message.Publisher {
	b := watched{Publisher: pub, a: a}
	pinger, pings := pub.(interface{ Ping(context.Context) error })
	async, asyncs := pub.(asyncPublisher)
	switch {
	case pings && asyncs:
		return watchedAsyncPinger{watchedAsync{b, async}, pinger}
	case pings:
		return watchedPinger{b, pinger}
	case asyncs:
		return watchedAsync{b, async}
	}
	return b
}

type asyncPublisher interface {
	PublishAsync(topic string, msg *message.Message, done func(error))
}

type watched struct {
	message.Publisher
	a *activity
}

func (w watched) Publish(topic string, msgs ...*message.Message) error {
	w.a.seen()
	return w.Publisher.Publish(topic, msgs...)
}

// Scheme is the relay's default when pub has none.
func (w watched) Scheme() string {
	if s, ok := w.Publisher.(interface{ Scheme() string }); ok {
		return s.Scheme()
	}
	return "watermill"
}

type watchedPinger struct {
	watched
	pinger interface{ Ping(context.Context) error }
}

func (w watchedPinger) Ping(ctx context.Context) error { return w.pinger.Ping(ctx) }

type watchedAsync struct {
	watched
	async asyncPublisher
}

func (w watchedAsync) PublishAsync(topic string, msg *message.Message, done func(error)) {
	w.a.seen()
	w.async.PublishAsync(topic, msg, done)
}

type watchedAsyncPinger struct {
	watchedAsync
	pinger interface{ Ping(context.Context) error }
}

func (w watchedAsyncPinger) Ping(ctx context.Context) error { return w.pinger.Ping(ctx) }
