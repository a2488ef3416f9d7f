package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	cekafka "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// emitOnePaid emits one order.paid and returns its id.
func emitOnePaid(t *testing.T, client *testent.Client) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "order-9", testent.OrderPaid{OrderID: 9, AmountCents: 900, Currency: "USD"},
			events.WithEventID(id))
	}))
	return id
}

// requireOrderPaidEvent checks the event the SDK read from the message of
// emitOnePaid.
func requireOrderPaidEvent(t *testing.T, msg binding.Message, id uuid.UUID) {
	t.Helper()
	ev, err := binding.ToEvent(context.Background(), msg)
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	require.Equal(t, id.String(), ev.ID())
	require.Equal(t, "order.paid.v2", ev.Type())
	require.Equal(t, "urn:shop:orders", ev.Source())
	require.Equal(t, "application/json", ev.DataContentType())
	require.Equal(t, "https://contracts.example.com/orders/schemas/order.paid.v2.json", ev.DataSchema())
	var data testent.OrderPaid
	require.NoError(t, ev.DataAs(&data))
	require.Equal(t, testent.OrderPaid{OrderID: 9, AmountCents: 900, Currency: "USD"}, data)
}

// TestCloudEventsOnNATSReadBySDK relays an event to NATS JetStream with
// the NATS binding's prefix and reads the stored message with the
// CloudEvents Go SDK's JetStream binding, as a consumer outside entoutbox
// would: binary mode, every attribute and the data. With the Kafka
// binding's ce_ keys the same binding takes the payload for a structured
// event and fails, which is why NATS needs its own prefix. A core-NATS
// subscription to the subject gets the same message, which the same
// binding reads as well. The binding puts datacontenttype under the prefix
// too (ce-datacontenttype; the NATS binding has no exception for it) and
// the message has no Content-Type header, which would mean structured mode
// when it says application/cloudevents.
func TestCloudEventsOnNATSReadBySDK(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	br := openBroker(t, "nats://127.0.0.1:4222", "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	got := receiveOn(t, br, prefix)
	core, err := nats.Connect("nats://127.0.0.1:4222")
	require.NoError(t, err)
	t.Cleanup(core.Close)
	// The topic's partition subjects (orders.~0, orders.~1, ...).
	coreSub, err := core.SubscribeSync(prefix + "orders.*")
	require.NoError(t, err)
	require.NoError(t, core.Flush())
	id := emitOnePaid(t, b.client)
	ce := &relay.CloudEvents{Source: "urn:shop:orders", DataSchemaBase: "https://contracts.example.com/orders/",
		Prefix: relay.CloudEventsPrefixFor("nats")}
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: br.Publisher(), TopicPrefix: prefix, CloudEvents: ce}))
	got.waitFor(t, emitted{ids: map[string]bool{id.String(): true}}, patience)
	require.NoError(t, stop())

	js, err := core.JetStream()
	require.NoError(t, err)
	sub, err := js.SubscribeSync(prefix+"orders.*", nats.OrderedConsumer())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	msg, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err)

	require.Equal(t, id.String(), msg.Header.Get("ce-id"), "the NATS binding's header name")
	require.Equal(t, "application/json", msg.Header.Get("ce-datacontenttype"), "the NATS binding's datacontenttype")
	for k := range msg.Header {
		require.NotEqual(t, "content-type", strings.ToLower(k), "no Content-Type header on NATS")
	}
	requireOrderPaidEvent(t, cejs.NewMessage(msg), id)
	coreMsg, err := coreSub.NextMsg(30 * time.Second)
	require.NoError(t, err)
	requireOrderPaidEvent(t, cejs.NewMessage(coreMsg), id)

	kafkaStyle := nats.NewMsg(msg.Subject)
	kafkaStyle.Data = msg.Data
	for k, v := range msg.Header {
		if name, ok := strings.CutPrefix(k, relay.CloudEventsPrefixNATS); ok {
			k = relay.CloudEventsPrefixKafka + name
		}
		kafkaStyle.Header[k] = v
	}
	_, err = binding.ToEvent(context.Background(), cejs.NewMessage(kafkaStyle))
	require.Error(t, err, "the SDK's NATS binding does not read ce_ headers")
}

// TestCloudEventsOnAMQPAsTheSpecNamesThem relays an event to RabbitMQ with
// each of the AMQP binding's prefixes and reads the AMQP headers of the
// delivery: the attributes are named as the binding's examples name them
// (section 3.1.3.1: time maps to cloudEvents_time, id to cloudEvents_id,
// specversion to cloudEvents_specversion; or with ':'), one separator per
// message, and the SDK's binding reader takes them with that prefix.
func TestCloudEventsOnAMQPAsTheSpecNamesThem(t *testing.T) {
	t.Parallel()
	for _, p := range []string{relay.CloudEventsPrefixFor("amqp"), relay.CloudEventsPrefixAMQPColon} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			testCloudEventsOnAMQP(t, p)
		})
	}
}

func testCloudEventsOnAMQP(t *testing.T, cePrefix string) {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	b := setupEmit(t)
	br := openBroker(t, url, "RabbitMQ at 127.0.0.1:5672")
	prefix := uniquePrefix()
	got := receiveOn(t, br, prefix) // declares the exchange and a queue, so the publish is routed

	conn, err := amqp.Dial(url)
	if err != nil {
		pgtest.Unavailable(t, "RabbitMQ at 127.0.0.1:5672", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", prefix+"orders", false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)

	id := emitOnePaid(t, b.client)
	ce := &relay.CloudEvents{Source: "urn:shop:orders", DataSchemaBase: "https://contracts.example.com/orders/", Prefix: cePrefix}
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: br.Publisher(), TopicPrefix: prefix, CloudEvents: ce}))
	got.waitFor(t, emitted{ids: map[string]bool{id.String(): true}}, patience)
	require.NoError(t, stop())

	var d amqp.Delivery
	select {
	case d = <-deliveries:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery on the test's own queue")
	}
	sep := cePrefix[len(cePrefix)-1:]
	headers := map[string]string{}
	for k, v := range d.Headers {
		headers[k] = fmt.Sprint(v)
	}
	require.Equal(t, "application/json", d.ContentType, "datacontenttype is the AMQP content-type property (section 3.1.1)")
	require.NotContains(t, headers, "cloudEvents"+sep+"datacontenttype",
		"all attributes but datacontenttype are application properties (section 3.1.3)")
	require.NotContains(t, headers, "content-type", "the property, not a header")
	require.Equal(t, id.String(), headers["cloudEvents"+sep+"id"])
	require.Equal(t, "1.0", headers["cloudEvents"+sep+"specversion"])
	require.NotEmpty(t, headers["cloudEvents"+sep+"time"])
	other := map[string]string{"_": ":", ":": "_"}[sep]
	for k := range headers {
		require.NotContains(t, k, "cloudEvents"+other, "one separator per message")
		require.NotContains(t, k, "ce_", "no Kafka-style key")
	}
	requireOrderPaidEvent(t, ceMessage{headers: headers, contentType: d.ContentType, payload: d.Body, specs: spec.WithPrefix(cePrefix)}, id)
}

// TestCloudEventsOnKafkaReadBySDK relays an event to Kafka (kfake, in
// process) with the default prefix and reads the record with the
// CloudEvents Go SDK's Kafka binding (protocol/kafka_sarama), as a consumer
// outside entoutbox would: binary mode, every attribute and the data. The
// binding maps datacontenttype to the content-type header ("For the binary
// mode, the header content-type property MUST be mapped directly to the
// CloudEvents datacontenttype attribute", section 3.2.1), not to a ce_ key.
func TestCloudEventsOnKafkaReadBySDK(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	b := setupEmit(t)
	br := openBroker(t, "kafka://"+strings.Join(c.ListenAddrs(), ","), "")
	prefix := uniquePrefix()
	got := receiveOn(t, br, prefix)
	id := emitOnePaid(t, b.client)
	ce := &relay.CloudEvents{Source: "urn:shop:orders", DataSchemaBase: "https://contracts.example.com/orders/",
		Prefix: relay.CloudEventsPrefixFor("kafka")}
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: br.Publisher(), TopicPrefix: prefix, CloudEvents: ce}))
	got.waitFor(t, emitted{ids: map[string]bool{id.String(): true}}, patience)
	require.NoError(t, stop())

	consumer, err := sarama.NewConsumer(c.ListenAddrs(), sarama.NewConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = consumer.Close() })
	partitions, err := consumer.Partitions(prefix + "orders")
	require.NoError(t, err)
	records := make(chan *sarama.ConsumerMessage, 1)
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(prefix+"orders", p, sarama.OffsetOldest)
		require.NoError(t, err)
		t.Cleanup(func() { _ = pc.Close() })
		go func() {
			for m := range pc.Messages() {
				records <- m
			}
		}()
	}
	var rec *sarama.ConsumerMessage
	select {
	case rec = <-records:
	case <-time.After(30 * time.Second):
		t.Fatal("no record on the topic")
	}
	headers := map[string]string{}
	for _, h := range rec.Headers {
		headers[string(h.Key)] = string(h.Value)
	}
	require.Equal(t, id.String(), headers["ce_id"], "the Kafka binding's header name")
	require.Equal(t, "application/json", headers["content-type"], "datacontenttype is the content-type header")
	require.NotContains(t, headers, "ce_datacontenttype", "datacontenttype is no ce_ header")
	requireOrderPaidEvent(t, cekafka.NewMessageFromConsumerMessage(rec), id)
}
