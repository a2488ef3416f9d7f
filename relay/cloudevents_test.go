package relay_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// ceMessage reads message headers as a CloudEvents binary-mode message
// whose attributes are prefixed keys (spec.WithPrefix) and whose
// datacontenttype is the protocol's content type, as the SDK's Kafka and
// AMQP bindings read their brokers' messages.
type ceMessage struct {
	headers     map[string]string
	contentType string
	payload     []byte
	specs       *spec.Versions
}

// kafkaStyle reads a Watermill message with the default prefix, ce_, and
// datacontenttype in the content-type key.
func kafkaStyle(msg *message.Message) ceMessage {
	return ceMessage{headers: msg.Metadata, contentType: msg.Metadata.Get("content-type"), payload: msg.Payload,
		specs: spec.WithPrefix(relay.CloudEventsPrefixKafka)}
}

func (m ceMessage) version() spec.Version {
	return m.specs.Version(m.headers[m.specs.PrefixedSpecVersionName()])
}

func (m ceMessage) ReadEncoding() binding.Encoding {
	if m.version() != nil {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m ceMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m ceMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	v := m.version()
	prefix := strings.TrimSuffix(m.specs.PrefixedSpecVersionName(), "specversion")
	if m.contentType != "" {
		if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), m.contentType); err != nil {
			return err
		}
	}
	for k, val := range m.headers {
		if a := v.Attribute(k); a != nil {
			if err := w.SetAttribute(a, val); err != nil {
				return err
			}
		} else if name, ok := strings.CutPrefix(k, prefix); ok {
			if err := w.SetExtension(name, val); err != nil {
				return err
			}
		}
	}
	return w.SetData(bytes.NewReader(m.payload))
}

func (m ceMessage) Finish(error) error { return nil }

// GetAttribute and GetExtension make it a binding.MessageMetadataReader,
// as the SDK's bindings are.
func (m ceMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	a := m.version().AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if k == spec.DataContentType && m.contentType != "" {
		return a, m.contentType
	}
	if v, ok := m.headers[a.PrefixedName()]; ok {
		return a, v
	}
	return a, nil
}

func (m ceMessage) GetExtension(name string) any {
	prefix := strings.TrimSuffix(m.specs.PrefixedSpecVersionName(), "specversion")
	if v, ok := m.headers[prefix+name]; ok {
		return v
	}
	return nil
}

// TestRelayedMessagesAreCloudEvents relays an event with CloudEvents on and
// decodes the message with the CloudEvents SDK: id, type, source, time,
// data schema and data are the event's (codegen's tests check the data
// schema names a generated file); and the generated handlers still take
// the message.
func TestRelayedMessagesAreCloudEvents(t *testing.T) {
	t.Parallel()
	forPaths(t, testRelayedMessagesAreCloudEvents)
}

func testRelayedMessagesAreCloudEvents(t *testing.T, p *onPath) {
	ctx := context.Background()
	b := p.emitBundle
	pubsub, got := receiveInProcess(t, "orders")
	id := uuid.New()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "order-7", testent.OrderPaid{OrderID: 7, AmountCents: 4200, Currency: "USD"},
			events.WithEventID(id), events.WithHeader("correlation_id", "c-7"))
	}))
	var createdAt time.Time
	require.NoError(t, b.db.DB.QueryRow(`SELECT created_at FROM outbox_events WHERE event_id = $1`, id).Scan(&createdAt))

	ce := &relay.CloudEvents{Source: "urn:shop:orders", DataSchemaBase: "https://contracts.example.com/orders/"}
	stop := runRelay(t, p.config(relay.Config{Publisher: pubsub, CloudEvents: ce}))
	want := emitted{ids: map[string]bool{id.String(): true}}
	got.waitFor(t, want, patience)
	require.NoError(t, stop())
	msg := got.msgs[id.String()]

	ev, err := binding.ToEvent(ctx, kafkaStyle(msg))
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	require.Equal(t, "1.0", ev.SpecVersion())
	require.Equal(t, id.String(), ev.ID())
	require.Equal(t, "order.paid.v2", ev.Type())
	require.Equal(t, "urn:shop:orders", ev.Source())
	require.True(t, createdAt.Equal(ev.Time()), "ce_time %s is the row's created_at %s", ev.Time(), createdAt)
	require.Equal(t, "application/json", ev.DataContentType())
	require.Equal(t, "application/json", msg.Metadata.Get(relay.MetaCloudEventsDataContentType), "the Kafka binding's content-type header")
	require.NotContains(t, msg.Metadata, "ce_datacontenttype", "datacontenttype is no ce_ key")
	require.Equal(t, "https://contracts.example.com/orders/schemas/order.paid.v2.json", ev.DataSchema())
	var data testent.OrderPaid
	require.NoError(t, ev.DataAs(&data))
	require.Equal(t, testent.OrderPaid{OrderID: 7, AmountCents: 4200, Currency: "USD"}, data)
	require.Empty(t, ev.Extensions(), "only the CloudEvents attributes are ce_ keys")

	// The outbox metadata is still there, and the consumers ignore the ce_ keys.
	require.Equal(t, "order.paid", msg.Metadata.Get(events.MetaEventName))
	require.Equal(t, "c-7", msg.Metadata.Get("correlation_id"))
	h := testent.NewOutboxHandlers(b.client)
	var handled *testent.OrderPaid
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		handled = e
		require.Equal(t, id, m.EventID)
		require.Equal(t, "c-7", m.Headers["correlation_id"])
		return nil
	})
	in := message.NewMessage(msg.UUID, msg.Payload)
	in.Metadata = msg.Metadata
	require.NoError(t, h.Handle(ctx, "billing", in))
	require.NotNil(t, handled, "the handler ran")
	require.Equal(t, data, *handled)
}

// TestRelayMessagesWithoutCloudEvents: off by default, no ce_ key goes out.
func TestRelayMessagesWithoutCloudEvents(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrders(t, b.client, 1, 1, 0)
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub}))
	got.waitFor(t, want, patience)
	require.NoError(t, stop())
	for id := range want.ids {
		for k := range got.msgs[id].Metadata {
			require.False(t, strings.HasPrefix(k, "ce_"), "metadata %s without CloudEvents", k)
		}
	}
}

func TestNewRefusesBadCloudEvents(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	_, err := relay.New(relay.Config{DB: b.db.DB, Publisher: pub, CloudEvents: &relay.CloudEvents{}})
	require.EqualError(t, err, "relay: Config.CloudEvents.Source is empty; name the producing service, e.g. urn:shop:orders")
	_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub,
		CloudEvents: &relay.CloudEvents{Source: "urn:shop:orders", DataSchemaBase: "contracts/orders"}})
	require.EqualError(t, err, `relay: Config.CloudEvents.DataSchemaBase "contracts/orders" is not an absolute URI`)
	_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub,
		CloudEvents: &relay.CloudEvents{Source: "urn:shop:orders", Prefix: "ce."}})
	require.EqualError(t, err, `relay: Config.CloudEvents.Prefix "ce." is no CloudEvents binding's: want "ce_" (Kafka), "ce-" (NATS), "cloudEvents_" or "cloudEvents:" (AMQP)`)
	_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub,
		CloudEvents: &relay.CloudEvents{Source: "urn:shop:orders", DataSchemaBase: "https://contracts.example.com/100%25/", Prefix: relay.CloudEventsPrefixNATS}})
	require.EqualError(t, err, `relay: Config.CloudEvents.DataSchemaBase "https://contracts.example.com/100%25/": character '%' would be percent-encoded by the NATS binding (Prefix "ce-"); leave it out`)
}
