package broker

import (
	"context"
	"fmt"
	"net/url"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ through watermill-amqp/v3's durable Pub/Sub: topic T is a durable
// fanout exchange named T, and group G is the durable queue "T_G" bound to it,
// so each group gets every message and its members share them. Messages are
// persistent and the publisher waits for the broker's confirm, so a Publish
// that returns nil has been taken by RabbitMQ.
//
// RabbitMQ drops what reaches an exchange with no queue bound: a group
// receives the messages published after its queue was first declared (by
// Subscribe), not those before.
//
// The publisher and all subscribers share one connection, which the module
// re-dials when it breaks.

func openAMQP(ctx context.Context, _ *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error) {
	connCfg := wmamqp.ConnectionConfig{
		AmqpURI: raw,
		// Bounds the TCP dial and the AMQP handshake, at Open and on every
		// reconnection (amqp091's default is 30 s).
		AmqpConfig: &amqp.Config{Dial: amqp.DefaultDial(connectTimeout)},
	}
	conn, err := bounded(ctx, func() (*wmamqp.ConnectionWrapper, error) {
		return wmamqp.NewConnection(connCfg, logger)
	}, func(c *wmamqp.ConnectionWrapper) { _ = c.Close() })
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	pub, err := wmamqp.NewPublisherWithConnection(amqpConfig(connCfg, nil), logger, conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("creating publisher: %w", err)
	}
	return &pubSub{
		pub: pub,
		newSub: func(group string) (message.Subscriber, error) {
			return wmamqp.NewSubscriberWithConnection(
				amqpConfig(connCfg, wmamqp.GenerateQueueNameTopicNameWithSuffix(group)), logger, conn)
		},
		closers: []func() error{conn.Close},
	}, nil
}

// amqpConfig is the module's durable Pub/Sub configuration with publisher
// confirms and the message UUID as AMQP message-id.
func amqpConfig(conn wmamqp.ConnectionConfig, queueName wmamqp.QueueNameGenerator) wmamqp.Config {
	cfg := wmamqp.NewDurablePubSubConfig(conn.AmqpURI, queueName)
	cfg.Connection = conn
	cfg.Marshaler = amqpMarshaler{}
	cfg.Publish.ConfirmDelivery = true
	return cfg
}

// amqpMarshaler is the module's DefaultMarshaler (UUID and metadata as
// headers) that also sets the standard message-id property to the UUID, for
// consumers and tools that do not know Watermill's header.
type amqpMarshaler struct{ wmamqp.DefaultMarshaler }

func (m amqpMarshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	p, err := m.DefaultMarshaler.Marshal(msg)
	if err != nil {
		return p, err
	}
	p.MessageId = msg.UUID
	return p, nil
}
