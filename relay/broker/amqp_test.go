package broker

import (
	"context"
	"testing"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func amqpChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// amqpSetup deletes the exchange and the group queues of the test's topic.
func amqpSetup(t *testing.T, topic string) string {
	need(t, "RabbitMQ", amqpURL)
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL)
		if err != nil {
			t.Logf("cleaning up: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("cleaning up: %v", err)
			return
		}
		for _, q := range amqpQueues.get(topic) {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Logf("deleting queue %s: %v", q, err)
			}
		}
		if err := ch.ExchangeDelete(topic, false, false); err != nil {
			t.Logf("deleting exchange %s: %v", topic, err)
		}
	})
	return amqpURL
}

// amqpQueues lists, per topic, the group queues a test made, for clean-up.
var amqpQueues = newSyncLists()

// amqpChecks binds a queue of its own to the topic's exchange and checks
// each message carries its UUID as AMQP message-id.
func amqpChecks(ctx context.Context, t *testing.T, _, topic, group string) func([]sentMessage) {
	amqpQueues.add(topic, topic+"_"+group)
	ch := amqpChannel(t)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", topic, false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	return func(sent []sentMessage) {
		for i, m := range sent {
			select {
			case d := <-deliveries:
				assert.Equal(t, m.uuid, d.MessageId, "message-id of message %d", i)
				assert.Equal(t, m.uuid, d.Headers[wmamqp.DefaultMessageUUIDHeaderKey], "UUID header of message %d", i)
				assert.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
			case <-ctx.Done():
				t.Fatalf("raw consumer got %d of %d messages", i, len(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("raw consumer got %d of %d messages", i, len(sent))
			}
		}
	}
}

func TestAMQPGroupShares(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.share." + randomSuffix()
	rawURL := amqpSetup(t, topic)
	amqpQueues.add(topic, topic+"_a", topic+"_b")
	testGroupShares(t, rawURL, topic)
}
