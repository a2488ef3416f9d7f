package broker

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patience bounds each wait for what a broker, a relay or PostgreSQL will
// do (a delivery, a dead letter, a start or stop): a liveness bound, not a
// speed limit. A passing test waits only as long as the work takes; on a
// loaded 2-core machine that is ten times as long as on an idle one.
const patience = 3 * time.Minute

func TestOpenUnknownScheme(t *testing.T) {
	_, err := Open(context.Background(), "foo://x", Options{})
	require.Error(t, err)
	assert.Equal(t, `broker: "foo://x": unknown scheme "foo" (want nats, amqp, redis, kafka, postgres or mem)`, err.Error())

	_, err = Open(context.Background(), "", Options{})
	assert.ErrorContains(t, err, `unknown scheme ""`)

	_, err = Open(context.Background(), "host=h password=s3cr3t-pw", Options{})
	assert.ErrorContains(t, err, `broker: "host=h password=xxxxx": unknown scheme ""`)

	_, err = Open(context.Background(), "foo://u:s3cr3t-pw@x", Options{})
	assert.ErrorContains(t, err, `broker: "foo://u:xxxxx@x": unknown scheme "foo"`)
}

func TestOpenBadURLHidesPassword(t *testing.T) {
	_, err := Open(context.Background(), "postgres://u:s3cr3t-pw@host:port/db", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `broker: "postgres://u:xxxxx@host:port/db": parsing URL`)
	assert.NotContains(t, err.Error(), "s3cr3t-pw")

	_, err = Open(context.Background(), "kafka://u:s3cr3t-pw@127.0.0.1:1", Options{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-pw")
}

// TestOpenUnreachable checks each broker reports an address nothing listens
// on at once, naming the URL without its password.
func TestOpenUnreachable(t *testing.T) {
	for _, rawURL := range []string{
		"nats://127.0.0.1:1",
		"nats://u:s3cr3t-pw@127.0.0.1:1",
		"amqp://guest:s3cr3t-pw@127.0.0.1:1/",
		"redis://:s3cr3t-pw@127.0.0.1:1/0",
		"kafka://127.0.0.1:1,127.0.0.1:2",
		"postgres://postgres:s3cr3t-pw@127.0.0.1:1/test",
		"postgresql://postgres@127.0.0.1:1/test?password=s3cr3t-pw",
	} {
		t.Run(strings.SplitN(rawURL, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			start := time.Now()
			b, err := Open(ctx, rawURL, Options{})
			if err == nil {
				b.Close()
				t.Fatalf("Open(%s) succeeded", rawURL)
			}
			assert.Less(t, time.Since(start), patience/2, "Open waited for its context instead of failing")
			assert.True(t, strings.HasPrefix(err.Error(), "broker: "+strconv.Quote(Redacted(rawURL))+": "), "%v", err)
			assert.NotContains(t, err.Error(), "s3cr3t-pw")
			t.Log(err)
		})
	}
}

func TestOpenErrorShape(t *testing.T) {
	_, err := Open(context.Background(), "nats://127.0.0.1:1", Options{})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), `broker: "nats://127.0.0.1:1": connecting: `), "%v", err)
}

// TestOpenHonoursContext points every broker at a server that accepts
// connections and never answers: Open gives up when ctx ends.
func TestOpenHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() }) // after the parallel subtests
	go func() {
		var conns []net.Conn // held open, silent, until the test ends
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	addr := ln.Addr().String()
	for _, rawURL := range []string{
		"nats://" + addr,
		"amqp://guest:guest@" + addr + "/",
		"redis://" + addr + "/0",
		"kafka://" + addr,
		"postgres://postgres@" + addr + "/test",
	} {
		t.Run(strings.SplitN(rawURL, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := Open(ctx, rawURL, Options{})
			require.Error(t, err)
			assert.Less(t, time.Since(start), 2*time.Second, "%v", err)
		})
	}
}

func TestSubscriberNeedsGroup(t *testing.T) {
	b, err := Open(context.Background(), "mem://", Options{})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Subscriber("")
	assert.Error(t, err)
	_, err = b.Subscriber("  ")
	assert.Error(t, err)
}

func TestClosedBroker(t *testing.T) {
	b, err := Open(context.Background(), "inprocess://", Options{})
	require.NoError(t, err)
	assert.Equal(t, "mem", b.Scheme())
	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	require.NoError(t, sub.Close()) // closed by the Broker already
	_, err = b.Subscriber("g")
	assert.Error(t, err)
}

func TestRedacted(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@h:5672/":          "amqp://guest:xxxxx@h:5672/",
		"redis://:pw@h:6379/0":                "redis://:xxxxx@h:6379/0",
		"nats://h:4222":                       "nats://h:4222",
		"kafka://a:9092,b:9092":               "kafka://a:9092,b:9092",
		"postgres://u@h/db?password=pw&x=1":   "postgres://u@h/db?password=xxxxx&x=1",
		"postgres://u:p%40ss@h/db":            "postgres://u:xxxxx@h/db",
		"postgres://u:pw@h:port/db":           "postgres://u:xxxxx@h:port/db",
		"postgres://u:pw@with@at@h:port/db?x": "postgres://u:xxxxx@h:port/db?x",
		"mem://":                              "mem://",
		"host=h password=pw user=u":           "host=h password=xxxxx user=u",
		"host=h password = 'p w' user=u":      "host=h password = xxxxx user=u",
	} {
		assert.Equal(t, want, Redacted(in), in)
	}
}

func TestScrubbed(t *testing.T) {
	err := scrubbed(assert.AnError, "redis://:pw@h")
	assert.Same(t, assert.AnError, err)
	inner := &testError{"auth failed for p%40ss and p@ss"}
	err = scrubbed(inner, "postgres://u:p%40ss@h/db")
	assert.Equal(t, "auth failed for xxxxx and xxxxx", err.Error())
	assert.ErrorIs(t, err, inner)
}

type testError struct{ s string }

func (e *testError) Error() string { return e.s }

// Every error a Broker returns starts with "broker: " and its scheme,
// whichever of its methods returns it, and wraps the cause.
func TestErrorsStartWithThePackage(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "mem://", Options{})
	require.NoError(t, err)
	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	_, err = sub.Subscribe(ctx, "orders")
	assert.EqualError(t, err, `broker: mem: subscribing to "orders": subscriber closed`)
	_, err = b.Subscriber(" ")
	assert.EqualError(t, err, "broker: mem: subscriber group is empty")
	assert.EqualError(t, b.Publisher().Publish(""), `broker: mem: invalid topic "": it is empty`)

	require.NoError(t, b.Close())
	_, err = b.Subscriber("g")
	assert.EqualError(t, err, "broker: mem: closed")
	err = b.Publisher().Publish("orders", newMessages(1)[0].message())
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "broker: mem: "), "%v", err)

	_, err = Open(ctx, "nats://127.0.0.1:1", Options{})
	assert.ErrorIs(t, err, nats.ErrNoServers)
}
