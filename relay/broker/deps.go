package broker

// Temporary: pins the broker modules in go.mod until the package uses them.
import (
	_ "github.com/IBM/sarama"
	_ "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	_ "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	_ "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	_ "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	_ "github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/rabbitmq/amqp091-go"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/spf13/cobra"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
