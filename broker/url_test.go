package broker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenRefusesIncompleteURLs checks every URL that lacks what its broker
// needs is refused with what is missing, before any connection: the context
// is cancelled, so a URL that got as far as connecting would fail otherwise.
func TestOpenRefusesIncompleteURLs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct{ url, want string }{
		{"nats://", `broker: "nats://": no host: name the NATS server, e.g. nats://127.0.0.1:4222`},
		{"nats://:4222", `broker: "nats://:4222": no host: name the NATS server, e.g. nats://127.0.0.1:4222`},
		{"nats://u:s3cr3t-pw@", `broker: "nats://u:xxxxx@": no host: name the NATS server, e.g. nats://127.0.0.1:4222`},
		{"nats://10.0.0.1:4222,:4222", `broker: "nats://10.0.0.1:4222,:4222": server 2 of 2 has no host: name every NATS server, e.g. nats://10.0.0.1:4222,10.0.0.2:4222`},
		{"amqp://", `broker: "amqp://": no host: name the RabbitMQ server, e.g. amqp://guest:guest@127.0.0.1:5672/`},
		{"amqps://guest:s3cr3t-pw@/", `broker: "amqps://guest:xxxxx@/": no host: name the RabbitMQ server, e.g. amqp://guest:guest@127.0.0.1:5672/`},
		{"redis://", `broker: "redis://": no host: name the Redis server, e.g. redis://127.0.0.1:6379/0`},
		{"rediss://:s3cr3t-pw@/0", `broker: "rediss://:xxxxx@/0": no host: name the Redis server, e.g. redis://127.0.0.1:6379/0`},
		{"kafka://", `broker: "kafka://": no broker address: list the Kafka brokers as host:port, e.g. kafka://10.0.0.1:9092,10.0.0.2:9092`},
		{"kafka://,", `broker: "kafka://,": no broker address: list the Kafka brokers as host:port, e.g. kafka://10.0.0.1:9092,10.0.0.2:9092`},
		{"kafka://10.0.0.1", `broker: "kafka://10.0.0.1": broker address "10.0.0.1" has no port: list the Kafka brokers as host:port, e.g. kafka://10.0.0.1:9092,10.0.0.2:9092`},
		{"kafka://10.0.0.1:9092,:9092", `broker: "kafka://10.0.0.1:9092,:9092": broker address ":9092" has no host: list the Kafka brokers as host:port, e.g. kafka://10.0.0.1:9092,10.0.0.2:9092`},
		{"kafka://u:s3cr3t-pw@10.0.0.1:9092", `broker: "kafka://u:xxxxx@10.0.0.1:9092": credentials in kafka:// URLs are not supported`},
		{"postgres:///test", `broker: "postgres:///test": no host: name the PostgreSQL server, e.g. postgres://user@127.0.0.1:5432/db, or a socket directory with ?host=/var/run/postgresql`},
		{"postgresql://u:s3cr3t-pw@/test", `broker: "postgresql://u:xxxxx@/test": no host: name the PostgreSQL server, e.g. postgres://user@127.0.0.1:5432/db, or a socket directory with ?host=/var/run/postgresql`},
		{"postgres://postgres@127.0.0.1:5432", `broker: "postgres://postgres@127.0.0.1:5432": no database: name it in the path, e.g. postgres://user@127.0.0.1:5432/db`},
		{"postgres://postgres@127.0.0.1:5432/", `broker: "postgres://postgres@127.0.0.1:5432/": no database: name it in the path, e.g. postgres://user@127.0.0.1:5432/db`},
		{"postgres:///?host=/var/run/postgresql", `broker: "postgres:///?host=/var/run/postgresql": no database: name it in the path, e.g. postgres://user@127.0.0.1:5432/db`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := Open(ctx, tc.url, Options{})
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

// TestOpenAcceptsCompleteURLs checks the forms that name their server get
// past the URL check: with the context cancelled, Open then fails on
// connecting, not on the URL.
func TestOpenAcceptsCompleteURLs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, rawURL := range []string{
		"nats://127.0.0.1",
		"nats://127.0.0.1:4222,nats://127.0.0.2:4222",
		"nats://127.0.0.1:4222,127.0.0.2:4222",
		"amqp://guest:guest@127.0.0.1/",
		"redis://127.0.0.1",
		"kafka://127.0.0.1:9092",
		"postgres://postgres@127.0.0.1/test",
		"postgres:///test?host=/var/run/postgresql",
		"postgres://127.0.0.1?dbname=test",
	} {
		t.Run(rawURL, func(t *testing.T) {
			_, err := Open(ctx, rawURL, Options{})
			require.Error(t, err)
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
	b, err := Open(ctx, "mem://", Options{})
	require.NoError(t, err)
	require.NoError(t, b.Close())
}
