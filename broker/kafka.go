package broker

import (
	"context"
	"fmt"
	"net/url"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
)

// Kafka through watermill-kafka/v3 (Sarama): topic T is the Kafka topic T and
// group G the consumer group G, which starts at the oldest offset when it is
// new.
//
// The record key is the message's aggregate id (metadata
// events.MetaAggregateID), so Sarama's hash partitioner puts all events of an
// aggregate in one partition, where they keep their publish order; the
// subscriber hands a partition's messages over one at a time, each after the
// previous one is acked. A message without an aggregate id has no key and
// goes to a random partition. Note Sarama hashes keys with FNV-1a, not the
// murmur2 of the Java client, so a Java producer would place the same key
// elsewhere.
//
// The producer waits for all in-sync replicas and keeps one request in
// flight per broker, so retries cannot reorder an aggregate's events.

func openKafka(ctx context.Context, u *url.URL, _ string, logger watermill.LoggerAdapter) (*pubSub, error) {
	brokers, err := kafkaBrokers(u) // checked by Open already
	if err != nil {
		return nil, err
	}

	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	// Fetching the cluster's metadata from the first broker that answers is
	// the reachability check.
	if err := kafkaPing(cctx, brokers); err != nil {
		return nil, err
	}

	pub, err := bounded(ctx, func() (*wmkafka.Publisher, error) {
		return wmkafka.NewPublisher(wmkafka.PublisherConfig{
			Brokers:               brokers,
			Marshaler:             kafkaMarshaler{},
			OverwriteSaramaConfig: kafkaPublisherConfig(),
		}, logger)
	}, func(p *wmkafka.Publisher) { _ = p.Close() })
	if err != nil {
		return nil, fmt.Errorf("creating publisher: %w", err)
	}
	return &pubSub{
		pub:  pub,
		ping: func(ctx context.Context) error { return kafkaPing(ctx, brokers) },
		newSub: func(group string) (message.Subscriber, error) {
			cfg := wmkafka.DefaultSaramaSubscriberConfig()
			cfg.ClientID = "entoutbox"
			cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
			return wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
				Brokers:               brokers,
				Unmarshaler:           kafkaMarshaler{},
				OverwriteSaramaConfig: cfg,
				ConsumerGroup:         group,
			}, logger)
		},
	}, nil
}

func kafkaPublisherConfig() *sarama.Config {
	cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
	cfg.ClientID = "entoutbox"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	return cfg
}

// kafkaMarshaler is the module's DefaultMarshaler (UUID and metadata as
// record headers) with the aggregate id as record key.
type kafkaMarshaler struct{ wmkafka.DefaultMarshaler }

func (m kafkaMarshaler) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	pm, err := m.DefaultMarshaler.Marshal(topic, msg)
	if err != nil {
		return nil, err
	}
	// Unlike the module's partitioning marshaler, no key (rather than an
	// empty one, which would pile keyless messages onto one partition).
	if id := msg.Metadata.Get(events.MetaAggregateID); id != "" {
		pm.Key = sarama.StringEncoder(id)
	}
	return pm, nil
}

// kafkaPing fetches the cluster's metadata from the first broker that
// answers, as Open does.
func kafkaPing(ctx context.Context, brokers []string) error {
	c, err := bounded(ctx, func() (sarama.Client, error) {
		cfg := sarama.NewConfig()
		cfg.ClientID = "entoutbox"
		cfg.Net.DialTimeout = connectTimeout
		cfg.Net.ReadTimeout = connectTimeout
		cfg.Net.WriteTimeout = connectTimeout
		cfg.Metadata.Retry.Max = 0
		return sarama.NewClient(brokers, cfg)
	}, func(c sarama.Client) { _ = c.Close() })
	if err != nil {
		return fmt.Errorf("fetching metadata: %w", err)
	}
	return c.Close()
}
