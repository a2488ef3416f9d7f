package consumer_test

import (
	"sync/atomic"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/schema"
)

// A consumer on a database without the tables its handlers write refuses
// to start, naming each missing table and what to run, as the relay does;
// it subscribes nothing, rather than failing on every message.
func TestAddToRouterRefusesAMissingTable(t *testing.T) {
	t.Parallel()
	const hint = "(run the ent migration first: client.Schema.Create)"
	addToRouter := func(t *testing.T, client *testent.Client) (*message.Router, int, error) {
		t.Helper()
		h := testent.NewOutboxHandlers(client, consumer.WithLogger(watermill.NopLogger{}))
		h.OnOrderPaid("billing", invoiceHandler(new(atomic.Int64)))
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		made := 0
		err = h.AddToRouter(r, func(string) (message.Subscriber, error) {
			made++
			return gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), nil
		})
		return r, made, err
	}

	t.Run("no tables", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
		r, made, err := addToRouter(t, client)
		require.EqualError(t, err, `consumer: the processed-events table "`+schema.ProcessedEventTable+`", dead-letter table "`+
			schema.DeadLetterTable+`", consumer positions table "`+schema.ConsumerPositionTable+`" do not exist `+hint)
		require.Empty(t, r.Handlers())
		require.Zero(t, made)
	})

	t.Run("positions missing", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
		pgtest.Migrate(t, client.Schema.Create)
		_, err := db.DB.Exec(`DROP TABLE ` + pgsql.QuoteIdent(schema.ConsumerPositionTable))
		require.NoError(t, err)
		r, made, err := addToRouter(t, client)
		require.EqualError(t, err, `consumer: the consumer positions table "`+schema.ConsumerPositionTable+`" does not exist `+hint)
		require.Empty(t, r.Handlers())
		require.Zero(t, made)
	})

	t.Run("dead letters missing", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
		pgtest.Migrate(t, client.Schema.Create)
		_, err := db.DB.Exec(`DROP TABLE ` + pgsql.QuoteIdent(schema.DeadLetterTable))
		require.NoError(t, err)
		_, _, err = addToRouter(t, client)
		require.EqualError(t, err, `consumer: the dead-letter table "`+schema.DeadLetterTable+`" does not exist `+hint)
	})

	t.Run("all there", func(t *testing.T) {
		t.Parallel()
		r, made, err := addToRouter(t, setup(t).client)
		require.NoError(t, err)
		require.NotEmpty(t, r.Handlers())
		require.Positive(t, made)
	})
}
