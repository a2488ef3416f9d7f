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

// TestSubscriberConformance runs Watermill's universal Pub/Sub suite on the
// fast Subscriber, with watermill-sql's Publisher and SchemaAdapter writing
// the rows. The outbox is one queue: every subscriber competes for the same
// rows (no consumer groups), rows persist, and each aggregate is delivered
// in order; the suite's messages of a topic share one aggregate, so its
// order tests apply.
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
		// The suite's messages of a topic are one aggregate, which one
		// subscriber at a time can hold: its long variants take minutes.
		ForceShort: true,
	}
	// One outbox for the whole suite: a test makes several Pub/Subs and
	// expects them to share their messages; each test has topics of its own.
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newConformancePubSub(t, db)
	}, nil)
}

func newConformancePubSub(t *testing.T, db *pgtest.DB) (message.Publisher, message.Subscriber) {
	// The suite publishes from 50 goroutines at once: through a pool of its
	// own, capped, they do not take 50 of the server's connections (100 by
	// default, shared with every other test). A publish refused for want of
	// one hangs the suite: its publishing goroutine exits without Done.
	pubDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	pubDB.SetMaxOpenConns(8)
	t.Cleanup(func() { pubDB.Close() })
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(pubDB), wsql.PublisherConfig{SchemaAdapter: relay.SchemaAdapter{}}, nil)
	require.NoError(t, err)
	sub, err := relay.NewSubscriber(db.DB, relay.SubscriberConfig{
		PollInterval: 50 * time.Millisecond, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		MaxAttempts: 1000, Lease: 2 * time.Second,
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
