package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testGroupShares subscribes two members of group "a" and one of group "b"
// to topic, publishes 20 messages and checks group "a" got each exactly once
// between its members and group "b" got them all.
func testGroupShares(t *testing.T, rawURL, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()

	subscribe := func(group string) <-chan *message.Message {
		s, err := b.Subscriber(group)
		require.NoError(t, err)
		ch, err := s.Subscribe(ctx, topic)
		require.NoError(t, err)
		return ch
	}
	a := merge(subscribe("a"), subscribe("a"))
	other := subscribe("b")

	sent := newMessages(20)
	publish(t, b, topic, sent)
	assertSame(t, sent, receive(ctx, t, a, len(sent)), false)
	assertSame(t, sent, receive(ctx, t, other, len(sent)), false)
	assertNothingMore(t, a, 200*time.Millisecond)
}

// merge forwards the messages of every channel to one.
func merge(chans ...<-chan *message.Message) <-chan *message.Message {
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range ch {
				out <- m
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// syncLists is a map of string lists safe for parallel tests.
type syncLists struct {
	mu sync.Mutex
	m  map[string][]string
}

func newSyncLists() *syncLists { return &syncLists{m: map[string][]string{}} }

func (l *syncLists) add(key string, values ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[key] = append(l.m[key], values...)
}

func (l *syncLists) get(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.m[key]...)
}
