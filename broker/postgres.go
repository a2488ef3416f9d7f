package broker

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PostgreSQL as the broker, through watermill-sql/v4 with its default
// PostgreSQL schema and offsets adapters: topic T is the table
// "watermill_T" (created by the first Publish or Subscribe of T), group G a
// row of "watermill_offsets_T". Useful when the only infrastructure is the
// database the outbox already lives in.
//
// A group's members take turns: the one that holds the offset row's lock
// reads a batch (up to 100 messages) and hands them out one at a time, each
// once the previous one is acked, so a topic is handled in order, one
// message at a time, however many members the group has. The acks commit
// with the batch: a member whose connection dies rolls them back, and the
// batch's acked messages come again.
//
// The default schema stores payloads in a JSON column, so payloads must be
// JSON (outbox events are). Subscribers poll (every second when idle) and see
// a row only once every transaction older than it has ended.
//
// Publisher and subscribers share one database/sql pool (pgx driver), which
// accepts the URL forms and parameters pgx does.

func openPostgres(ctx context.Context, _ *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error) {
	db, err := sql.Open("pgx", raw)
	if err != nil {
		return nil, fmt.Errorf("opening: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connecting: %w", err)
	}
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(db), wsql.PublisherConfig{
		SchemaAdapter:        wsql.DefaultPostgreSQLSchema{},
		AutoInitializeSchema: true,
	}, logger)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("creating publisher: %w", err)
	}
	return &pubSub{
		pub:  pub,
		ping: db.PingContext,
		newSub: func(group string) (message.Subscriber, error) {
			return wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
				ConsumerGroup:    group,
				SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
				OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
				InitializeSchema: true,
			}, logger)
		},
		closers: []func() error{db.Close},
	}, nil
}
