package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// TestSubscriberConformance runs Watermill's universal Pub/Sub suite, in
// its long mode, on the fast Subscriber, with watermill-sql's Publisher and
// SchemaAdapter writing the rows. The outbox is one queue: every subscriber
// competes for the same rows (no consumer groups), rows persist, and each
// aggregate is delivered in order; the suite's messages of a topic share
// one aggregate, so its order tests apply.
//
// It runs on a private server with PostgreSQL's default max_connections
// (100), none of them taken by other tests: the suite's concurrent tests
// start 50 Subscribers at once, and they must fit (each holds one
// connection for its liveness locks; all share one LISTEN connection).
//
// Two adaptations, undone on the way out: the outbox stores payloads as
// JSONB and the suite's ("x") are not JSON, so they travel as JSON strings;
// and an event id is unique across the whole outbox (it is the consumers'
// dedupe key) while the suite publishes one message id on several topics,
// so the id is made per topic.
func TestSubscriberConformance(t *testing.T) {
	features := tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    false,
	}
	server := pgtest.StartPrivate(t, "max_connections=100")
	// One outbox for the whole suite: a test makes several Pub/Subs and
	// expects them to share their messages; each test has topics of its own.
	subDB := server.Open(t)
	// Room for the 50 Subscribers' liveness sessions and their claims,
	// beside the publishers' pool.
	subDB.SetMaxOpenConns(80)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, subDB)))
	pgtest.Migrate(t, client.Schema.Create)
	// The suite publishes from 50 goroutines at once: through a pool of its
	// own, capped. A publish refused for want of a connection hangs the
	// suite: its publishing goroutine exits without Done.
	pubDB := server.Open(t)
	pubDB.SetMaxOpenConns(8)
	tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newConformancePubSub(t, subDB, pubDB)
	}, nil)
}

func newConformancePubSub(t *testing.T, subDB, pubDB *sql.DB) (message.Publisher, message.Subscriber) {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(pubDB), wsql.PublisherConfig{SchemaAdapter: relay.SchemaAdapter{}}, nil)
	require.NoError(t, err)
	sub, err := relay.NewSubscriber(subDB, relay.SubscriberConfig{
		PollInterval: 50 * time.Millisecond, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		MaxAttempts: 1000, Lease: 15 * time.Second,
	})
	require.NoError(t, err)
	return jsonPublisher{pub}, jsonSubscriber{sub, make(chan struct{})}
}

const suiteUUID = "conformance_uuid"

// jsonPublisher writes any payload as a JSON string, with the outbox
// metadata an Emit would set.
type jsonPublisher struct{ message.Publisher }

func (p jsonPublisher) Publish(topic string, msgs ...*message.Message) error {
	out := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		b, err := json.Marshal(string(m.Payload))
		if err != nil {
			return err
		}
		c := message.NewMessage(uuid.NewSHA1(uuid.NameSpaceOID, []byte(topic+"/"+m.UUID)).String(), b)
		for k, v := range m.Metadata {
			c.Metadata.Set(k, v)
		}
		c.Metadata.Set(suiteUUID, m.UUID)
		c.Metadata.Set(events.MetaEventName, "conformance")
		c.Metadata.Set(events.MetaEventVersion, "1")
		c.Metadata.Set(events.MetaAggregateType, "Test")
		c.Metadata.Set(events.MetaAggregateID, topic) // one ordered stream per topic
		c.SetContext(m.Context())
		out[i] = c
	}
	return p.Publisher.Publish(topic, out...)
}

// jsonSubscriber unwraps the payloads and passes acks and nacks back.
type jsonSubscriber struct {
	*relay.Subscriber
	closed chan struct{}
}

func (s jsonSubscriber) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return s.Subscriber.Close()
}

func (s jsonSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for m := range in {
			var payload string
			_ = json.Unmarshal(m.Payload, &payload)
			c := message.NewMessage(m.Metadata.Get(suiteUUID), []byte(payload))
			c.Metadata = m.Metadata
			c.SetContext(m.Context()) // ends when m is acked or nacked
			select {
			case out <- c:
			case <-ctx.Done():
				m.Nack()
				return
			case <-s.closed:
				return
			}
			select {
			case <-c.Acked():
				m.Ack()
			case <-c.Nacked():
				m.Nack()
			case <-ctx.Done():
				m.Nack()
				return
			case <-s.closed:
				return
			}
		}
	}()
	return out, nil
}
