package consumer_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A handler set given no logger says, through slog.Default() at its
// default level, each consumer's subscriptions under their full names,
// prefix included: what the relay's "Relay starting" line must match. Not
// parallel: it sets slog's default logger.
func TestSubscriptionsAreLoggedAtTheDefaultLevel(t *testing.T) {
	var logs lockedBuffer
	previous := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(previous) })

	decode := func(int, []byte) (any, error) { return nil, nil }
	set := consumer.NewSet([]consumer.EventType{
		{Name: "order.paid", Topic: "orders", Latest: 1, Decode: decode},
		{Name: "price.changed", Topic: "catalog", Latest: 1, Decode: decode},
	}, func(context.Context, consumer.DeadLetter) error { return nil }, consumer.WithTopicPrefix("prod."))
	handle := func(context.Context, any, events.Meta) error { return nil }
	require.NoError(t, set.Register("logged-billing", "order.paid", handle))
	require.NoError(t, set.Register("logged-billing", "price.changed", handle))
	require.NoError(t, set.Register("logged-shipping", "order.paid", handle))
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, set.AddToRouter(r, func(string) (message.Subscriber, error) {
		return gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), nil
	}))

	// watermill's slog adapter writes the fields in map order.
	field := func(line, name string) string {
		m := regexp.MustCompile(` ` + name + `=(\S+)`).FindStringSubmatch(line)
		if m == nil {
			return ""
		}
		return m[1]
	}
	var got []string
	for _, line := range regexp.MustCompile(`(?m)^.*msg="Consumer subscribing".*$`).FindAllString(logs.String(), -1) {
		require.Contains(t, line, "level=INFO")
		got = append(got, field(line, "consumer")+" "+field(line, "topic")+" prefix="+field(line, "topic_prefix"))
	}
	sort.Strings(got)
	require.Equal(t, []string{
		"logged-billing prod.catalog prefix=prod.",
		"logged-billing prod.orders prefix=prod.",
		"logged-shipping prod.orders prefix=prod.",
	}, got)
}
