package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// The relay publishes each committed outbox row to its topic, with the
// event id as message UUID (the consumers' dedupe key), and records it as
// delivered once the publisher returned. Here the publisher is Watermill's
// in-process gochannel; broker.Open(ctx, "nats://...", broker.Options{})
// gives one for a real broker.
func ExampleRelay_Run() {
	ctx := context.Background()
	db, client, done := exampleDB("relay_run")
	defer done()

	var id uuid.UUID
	err := client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "42", testent.OrderPaid{OrderID: 42, AmountCents: 1999},
			events.ReturnEventID(&id))
	})
	if err != nil {
		log.Fatal(err)
	}

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	received, err := pubsub.Subscribe(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}

	r, err := relay.New(relay.Config{DB: db, Publisher: pubsub})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- r.Run(runCtx) }()

	select {
	case msg := <-received:
		fmt.Println("event:", msg.Metadata.Get(events.MetaEventName), "about", msg.Metadata.Get(events.MetaAggregateID))
		fmt.Println("payload:", string(msg.Payload))
		fmt.Println("UUID is the event id:", msg.UUID == id.String())
		msg.Ack()
	case <-time.After(3 * time.Minute):
		log.Fatal("nothing was published")
	}

	stop() // Run returns once the publishes in flight are recorded
	fmt.Println("stopped:", <-stopped)
	fmt.Println("delivered:", client.Outbox.Query().OnlyX(ctx).DeliveredAt != nil)
	// Output:
	// event: order.paid about 42
	// payload: {"currency": "EUR", "order_id": 42, "amount_cents": 1999}
	// UUID is the event id: true
	// stopped: <nil>
	// delivered: true
}

// The examples need the test server; without it they are left out of the
// run (unless CI=true) rather than fail on their output.
func init() { pgtest.SkipExamplesUnlessReachable() }

// exampleDB returns a migrated schema of its own, an ent client on it, and
// the function that drops it.
func exampleDB(name string) (*sql.DB, *testent.Client, func()) {
	ctx := context.Background()
	db, err := pgtest.Open(ctx, name)
	if err != nil {
		log.Fatal(err)
	}
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	if err := client.Schema.Create(ctx); err != nil {
		_ = db.Drop()
		log.Fatal(err)
	}
	return db.DB, client, func() {
		if err := db.Drop(); err != nil {
			log.Print(err)
		}
	}
}
