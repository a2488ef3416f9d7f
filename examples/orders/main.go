// Command orders is the entoutbox example, end to end: it places orders and
// emits OrderPlaced (line items and a shipping address, nested in the
// payload) and OrderPaid in the same ent transaction as each order, shows
// that a rolled-back transaction leaves no event behind and that a bad line
// item is refused with its path, relays the committed events to a broker,
// and consumes them with generated, typed handlers: one ships each order,
// one writes one invoice per order, even when the broker delivers an event
// twice. An unpaid order is cancelled by an event scheduled for its payment
// deadline, delivered when it is due; the deadline of an order paid in time
// is called off before it comes.
//
//	go run ./examples/orders                                # SQLite and embedded NATS: nothing to install
//	go run ./examples/orders --database-url postgres://postgres@127.0.0.1:5432/test
//	go run ./examples/orders --database-url mysql://root@127.0.0.1:3306/test
//	go run ./examples/orders --broker amqp://guest:guest@127.0.0.1:5672/
//
// By default it works in a SQLite file of its own in the temporary
// directory, made afresh on every run. Given a PostgreSQL URL (or
// DATABASE_URL), it works in its own PostgreSQL schema, "orders_example",
// which it drops and creates afresh on every run; given a MySQL or MariaDB
// URL, in a database of that name on the server, made afresh likewise.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/broker/natsembed"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/examples/orders/ent"
	"github.com/entoutbox/entoutbox/examples/orders/ent/order"
	"github.com/entoutbox/entoutbox/examples/orders/ent/outbox"
	"github.com/entoutbox/entoutbox/mysqldb"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// defaultDatabaseURL is a SQLite file in the temporary directory.
var defaultDatabaseURL = "sqlite:" + filepath.Join(os.TempDir(), "entoutbox-orders-example.db")

// Config is what the example runs with.
type Config struct {
	DatabaseURL string
	Schema      string // PostgreSQL schema the example works in
	Broker      string // broker URL; empty starts an embedded NATS server
	Orders      int    // orders to place
	Timeout     time.Duration
}

func main() {
	cfg := Config{DatabaseURL: os.Getenv("DATABASE_URL"), Schema: "orders_example"}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = defaultDatabaseURL
	}
	flag.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "sqlite:PATH, a PostgreSQL or a mysql:// URL (env DATABASE_URL)")
	flag.StringVar(&cfg.Schema, "schema", cfg.Schema, "PostgreSQL schema to create and use")
	flag.StringVar(&cfg.Broker, "broker", "", "broker URL (nats://, amqp://, redis://, kafka://, postgres://, mem://); empty: an embedded NATS server")
	flag.IntVar(&cfg.Orders, "orders", 3, "number of orders to place")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "how long to wait for the events to arrive")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, os.Stdout, cfg); err != nil {
		log.Fatalf("orders example: %v", err)
	}
}

// Run executes the example and writes what happens to out.
func Run(ctx context.Context, out io.Writer, cfg Config) error {
	client, db, err := openClient(ctx, cfg)
	if err != nil {
		return err
	}
	defer client.Close()

	b, closeBroker, err := openBroker(ctx, out, cfg.Broker)
	if err != nil {
		return err
	}
	defer closeBroker()

	t := &tally{invoiced: map[int64]bool{}, shipped: map[int64]bool{}, deliveries: map[string]int{}, expired: map[int64]bool{}}
	routerDone, stopRouter, err := startConsumers(ctx, out, client, b, t)
	if err != nil {
		return err
	}
	defer stopRouter()

	// The relay: committed outbox rows to the broker.
	r, err := relay.New(relay.Config{DB: db, Publisher: b.Publisher(), PollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	relayDone, stopRelay := runInBackground(ctx, r.Run)
	defer stopRelay()

	if err := placeOrders(ctx, out, client, cfg.Orders); err != nil {
		return err
	}
	if err := scheduleDeadlines(ctx, out, client); err != nil {
		return err
	}

	deadline := time.Now().Add(cfg.Timeout)
	if err := waitHandled(ctx, t, cfg, deadline, relayDone, routerDone); err != nil {
		return err
	}
	pending, err := waitRelayed(ctx, client, deadline)
	if err != nil {
		return err
	}
	invoices, err := client.Invoice.Query().Count(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "done: %d orders placed and paid, %d events relayed (pending in the outbox: %d), %d shipped, %d invoices written once each, %d unpaid order cancelled when its deadline came\n",
		cfg.Orders, 2*cfg.Orders+len(t.expired), pending, len(t.shipped), invoices, len(t.expired))
	return nil
}

// tally is what the consumers have seen, shared between their goroutines.
type tally struct {
	mu          sync.Mutex
	invoiced    map[int64]bool
	shipped     map[int64]bool
	skipped     int
	deliveries  map[string]int
	lostAckOnce string
	expired     map[int64]bool
}

// mark records id in set under the tally's lock.
func (t *tally) mark(set map[int64]bool, id int64) {
	t.mu.Lock()
	set[id] = true
	t.mu.Unlock()
}

// openBroker opens the broker at url, or an embedded NATS server's when url
// is empty; closeAll closes the broker, then the server.
func openBroker(ctx context.Context, out io.Writer, url string) (b broker.Broker, closeAll func(), err error) {
	shutdown := func() {}
	if url == "" {
		srv, err := natsembed.Start("")
		if err != nil {
			return nil, nil, fmt.Errorf("starting the embedded NATS server: %w", err)
		}
		shutdown = srv.Shutdown
		url = srv.URL()
		fmt.Fprintf(out, "started an embedded NATS JetStream server\n")
	}
	if b, err = broker.Open(ctx, url, broker.Options{}); err != nil {
		shutdown()
		return nil, nil, err
	}
	return b, func() { _ = b.Close(); shutdown() }, nil
}

// startConsumers registers the example's handlers on a router fed by b and
// runs it until stop is called; done reports why it stopped.
func startConsumers(ctx context.Context, out io.Writer, client *ent.Client, b broker.Broker, t *tally) (done <-chan error, stop func(), err error) {
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return nil, nil, err
	}
	router.AddMiddleware(loseFirstBillingAck(out, t))
	if err := newHandlers(out, client, b, t).AddToRouter(router, b.Subscriber); err != nil {
		return nil, nil, err
	}
	done, stop = runInBackground(ctx, router.Run)
	<-router.Running()
	return done, stop, nil
}

// runInBackground runs run in a goroutine until stop is called; stop waits
// for it to return, and done carries what it returned.
func runInBackground(ctx context.Context, run func(context.Context) error) (done <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() { result <- run(ctx) }()
	return result, func() { cancel(); <-result }
}

// newHandlers is the consumers: generated, typed handlers; billing writes an
// invoice in the same transaction as its dedupe record.
func newHandlers(out io.Writer, client *ent.Client, b broker.Broker, t *tally) *ent.OutboxHandlers {
	handlers := ent.NewOutboxHandlers(client)
	handlers.OnOrderPaid("billing", func(ctx context.Context, tx *ent.Tx, e *ent.OrderPaid, m events.Meta) error {
		if err := tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).SetCurrency(e.Currency).Exec(ctx); err != nil {
			return err
		}
		fmt.Fprintf(out, "billing: invoiced order %d, %d.%02d %s (event %s v%d via %s)\n",
			e.OrderID, e.AmountCents/100, e.AmountCents%100, e.Currency, m.EventID, m.Version, b.Scheme())
		t.mark(t.invoiced, e.OrderID)
		return nil
	})
	handlers.OnOrderPlaced("shipping", func(ctx context.Context, tx *ent.Tx, e *ent.OrderPlaced, m events.Meta) error {
		items := 0
		for _, l := range e.Lines {
			items += l.Qty
		}
		fmt.Fprintf(out, "shipping: order %d, %d items in %d lines to %s, %s, %s (event %s v%d)\n",
			e.OrderID, items, len(e.Lines), e.ShipTo.Name, e.ShipTo.City, e.ShipTo.Country, m.EventID, m.Version)
		t.mark(t.shipped, e.OrderID)
		return nil
	})
	// A scheduled event arrives once it is due, never before: its payment
	// deadline passed, the order is cancelled.
	handlers.OnOrderCancelled("expiry", func(ctx context.Context, tx *ent.Tx, e *ent.OrderCancelled, m events.Meta) error {
		if err := tx.Order.UpdateOneID(e.OrderID).Where(order.StatusEQ(order.StatusPENDING)).
			SetStatus(order.StatusCANCELLED).Exec(ctx); err != nil && !ent.IsNotFound(err) {
			return err
		}
		fmt.Fprintf(out, "expiry: order %d cancelled: %s (due %s, handled %s after)\n", e.OrderID, e.Reason,
			m.DeliverAt.Local().Format("15:04:05.000"), time.Since(m.DeliverAt).Round(time.Millisecond))
		t.mark(t.expired, e.OrderID)
		return nil
	})
	return handlers
}

// loseFirstBillingAck simulates an ack lost on the way to the broker for
// billing's first event: the broker delivers it again, and the dedupe record
// makes the handler skip it.
func loseFirstBillingAck(out io.Writer, t *tally) message.HandlerMiddleware {
	return func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := next(msg)
			// Every consumer receives the topic's events; billing handles
			// order.paid only, which is where the lost ack is simulated.
			consumerName, _, _ := strings.Cut(message.HandlerNameFromCtx(msg.Context()), "/")
			if consumerName != "billing" || msg.Metadata.Get(events.MetaEventName) != "order.paid" {
				return produced, err
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			t.deliveries[msg.UUID]++
			if t.deliveries[msg.UUID] > 1 {
				t.skipped++
				fmt.Fprintf(out, "billing: event %s delivered again, skipped: already processed\n", msg.UUID)
			}
			if err == nil && t.lostAckOnce == "" {
				t.lostAckOnce = msg.UUID
				fmt.Fprintf(out, "billing: pretending the ack of event %s was lost\n", msg.UUID)
				return nil, errors.New("ack lost (simulated)")
			}
			return produced, err
		}
	}
}

// waitHandled waits until every order is invoiced and shipped, a redelivery
// was skipped and the unpaid order expired, or until something stops.
func waitHandled(ctx context.Context, t *tally, cfg Config, deadline time.Time, relayDone, routerDone <-chan error) error {
	done := func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		return len(t.invoiced) == cfg.Orders && len(t.shipped) == cfg.Orders && t.skipped > 0 && len(t.expired) == 1
	}
	for !done() {
		select {
		case err := <-relayDone:
			return fmt.Errorf("the relay stopped: %w", err)
		case err := <-routerDone:
			return fmt.Errorf("the consumer stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the events were not all handled within %s", cfg.Timeout)
		}
	}
	return nil
}

// waitRelayed waits until the outbox has nothing pending or the deadline
// passes: the relay records deliveries per batch, right after the broker's acks.
func waitRelayed(ctx context.Context, client *ent.Client, deadline time.Time) (int, error) {
	for {
		pending, err := client.Outbox.Query().Where(outbox.DeliveredAtIsNil()).Count(ctx)
		if err != nil || pending == 0 || time.Now().After(deadline) {
			return pending, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// paymentDeadline is how long the example's unpaid orders wait for their
// payment: a day in a shop, a second here.
const paymentDeadline = time.Second

// scheduleDeadlines places two unpaid orders, each with an order.cancelled
// scheduled for its payment deadline in the same transaction; the second
// is paid in time, and its deadline is called off (Cancel).
func scheduleDeadlines(ctx context.Context, out io.Writer, client *ent.Client) error {
	place := func(customer string) (*ent.Order, uuid.UUID, error) {
		var (
			o        *ent.Order
			deadline uuid.UUID
		)
		err := client.WithTx(ctx, func(tx *ent.Tx) error {
			var err error
			if o, err = tx.Order.Create().SetCustomer(customer).SetAmountCents(1500).Save(ctx); err != nil {
				return err
			}
			due := time.Now().Add(paymentDeadline)
			return tx.Outbox.EmitOrderCancelled(ctx, o.ID,
				ent.OrderCancelled{OrderID: o.ID, Reason: "not paid within " + paymentDeadline.String(), CancelledAt: due},
				events.DeliverAt(due), events.ReturnEventID(&deadline))
		})
		return o, deadline, err
	}
	o, _, err := place("customer-unpaid")
	if err != nil {
		return fmt.Errorf("placing an unpaid order: %w", err)
	}
	fmt.Fprintf(out, "placed order %d unpaid, with order.cancelled scheduled for its payment deadline, in %s\n", o.ID, paymentDeadline)

	o, deadline, err := place("customer-pays")
	if err != nil {
		return fmt.Errorf("placing an order paid in time: %w", err)
	}
	var result events.CancelResult
	err = client.WithTx(ctx, func(tx *ent.Tx) error {
		if err := tx.Order.UpdateOneID(o.ID).SetStatus(order.StatusPAID).Exec(ctx); err != nil {
			return err
		}
		result, err = tx.Outbox.Cancel(ctx, deadline)
		return err
	})
	if err != nil {
		return fmt.Errorf("calling off the deadline of order %d: %w", o.ID, err)
	}
	fmt.Fprintf(out, "order %d paid in time: its scheduled order.cancelled is %s\n", o.ID, result)
	return nil
}

// linesOf is order i's line items: i teas and a mug, 10.00 EUR per i.
func linesOf(i int) []ent.OrderPlacedLine {
	return []ent.OrderPlacedLine{
		{Sku: "tea-earl-grey", Qty: i, UnitCents: 500},
		{Sku: "mug", Qty: 1, UnitCents: int64(500 * i)},
	}
}

// placeOrders creates and pays orders, each in one transaction with its
// events, then shows a rolled-back and two refused emits.
func placeOrders(ctx context.Context, out io.Writer, client *ent.Client, n int) error {
	for i := 1; i <= n; i++ {
		err := client.WithTx(ctx, func(tx *ent.Tx) error {
			lines := linesOf(i)
			var amount int64
			for _, l := range lines {
				amount += int64(l.Qty) * l.UnitCents
			}
			o, err := tx.Order.Create().SetCustomer(fmt.Sprintf("customer-%d", i)).
				SetAmountCents(amount).SetStatus(order.StatusPAID).Save(ctx)
			if err != nil {
				return err
			}
			// ShipTo.Country is left out: its declared default, FR, fills it in.
			if err := tx.Outbox.EmitOrderPlaced(ctx, o.ID, ent.OrderPlaced{OrderID: o.ID, Lines: lines,
				ShipTo:     ent.OrderPlacedShipTo{Name: o.Customer, Street: fmt.Sprintf("%d rue de la Paix", i), City: "Paris"},
				Attributes: map[string]string{"gift_note": "enjoy"}}); err != nil {
				return err
			}
			return tx.Outbox.EmitOrderPaid(ctx, o.ID,
				ent.OrderPaid{OrderID: o.ID, AmountCents: o.AmountCents, Currency: "EUR"})
		})
		if err != nil {
			return fmt.Errorf("placing order %d: %w", i, err)
		}
		fmt.Fprintf(out, "placed order %d and emitted order.placed and order.paid in the same transaction\n", i)
	}

	// A transaction that fails after emitting: the event goes with it.
	errDeclined := errors.New("card declined")
	err := client.WithTx(ctx, func(tx *ent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("customer-declined").SetAmountCents(999).Save(ctx)
		if err != nil {
			return err
		}
		if err := tx.Outbox.EmitOrderPaid(ctx, o.ID,
			ent.OrderPaid{OrderID: o.ID, AmountCents: o.AmountCents}); err != nil {
			return err
		}
		return errDeclined
	})
	if !errors.Is(err, errDeclined) {
		return fmt.Errorf("the declined order should have rolled back, got %v", err)
	}
	fmt.Fprintln(out, "rolled back: customer-declined (card declined), its order.paid event is gone with it")

	// An invalid payload is refused before it reaches the database.
	err = client.WithTx(ctx, func(tx *ent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "0", ent.OrderPaid{OrderID: 0, AmountCents: 500, Currency: "JPY"})
	})
	fmt.Fprintf(out, "refused: %v\n", err)

	// So is a bad line item, named by its path in the payload.
	err = client.WithTx(ctx, func(tx *ent.Tx) error {
		lines := linesOf(1)
		lines[1].Qty = 0
		return tx.Outbox.EmitOrderPlaced(ctx, "0", ent.OrderPlaced{OrderID: 0, Lines: lines,
			ShipTo: ent.OrderPlacedShipTo{Name: "nobody", Street: "nowhere", City: "Paris"}})
	})
	fmt.Fprintf(out, "refused: %v\n", err)

	committed, err := client.Outbox.Query().Count(ctx)
	if err != nil {
		return fmt.Errorf("reading the outbox: %w", err)
	}
	fmt.Fprintf(out, "outbox holds %d committed events\n", committed)
	return nil
}

// openClient connects, creates the example's schema and migrates it. Its
// errors show the database URL with its password redacted.
func openClient(ctx context.Context, cfg Config) (*ent.Client, *sql.DB, error) {
	if sqlitedb.IsURL(cfg.DatabaseURL) {
		return openSQLite(ctx, cfg.DatabaseURL)
	}
	if mysqldb.IsURL(cfg.DatabaseURL) {
		return openMySQL(ctx, cfg)
	}
	admin, err := sql.Open("pgx", cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("opening database: %w", err)
	}
	_, err = admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+quoteIdent(cfg.Schema)+` CASCADE; CREATE SCHEMA `+quoteIdent(cfg.Schema))
	admin.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("creating schema %s (is PostgreSQL running at %s?): %w",
			cfg.Schema, broker.Redacted(cfg.DatabaseURL), err)
	}
	db, err := sql.Open("pgx", withSearchPath(cfg.DatabaseURL, cfg.Schema))
	if err != nil {
		return nil, nil, fmt.Errorf("opening database: %w", err)
	}
	return migrated(ctx, dialect.Postgres, db, "migrating")
}

// openMySQL makes the example's database (named as its PostgreSQL schema)
// afresh on the MySQL or MariaDB server of cfg's URL, and migrates it.
func openMySQL(ctx context.Context, cfg Config) (*ent.Client, *sql.DB, error) {
	admin, err := mysqldb.Open(cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("opening database: %w", err)
	}
	name := "`" + strings.ReplaceAll(cfg.Schema, "`", "``") + "`"
	_, err = admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name)
	if err == nil {
		_, err = admin.ExecContext(ctx, `CREATE DATABASE `+name+` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`)
	}
	admin.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("creating database %s (is MySQL running at %s?): %w",
			cfg.Schema, broker.Redacted(cfg.DatabaseURL), err)
	}
	url, err := mysqldb.WithDatabase(cfg.DatabaseURL, cfg.Schema)
	if err != nil {
		return nil, nil, err
	}
	db, err := mysqldb.Open(url)
	if err != nil {
		return nil, nil, fmt.Errorf("opening database: %w", err)
	}
	return migrated(ctx, dialect.MySQL, db, "migrating")
}

// openSQLite makes the SQLite file of url afresh and migrates it.
func openSQLite(ctx context.Context, url string) (*ent.Client, *sql.DB, error) {
	path := sqlitedb.Path(url)
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("making %s afresh: %w", path, err)
		}
	}
	db, err := sqlitedb.Open(url)
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return migrated(ctx, dialect.SQLite, db, "migrating "+path)
}

// migrated is the ent client of db (of ent's dialect d), migrated; doing
// names the migration in its error.
func migrated(ctx context.Context, d string, db *sql.DB, doing string) (*ent.Client, *sql.DB, error) {
	client := ent.NewClient(ent.Driver(entsql.OpenDB(d, db)))
	if err := client.Schema.Create(ctx); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("%s: %w", doing, err)
	}
	return client, db, nil
}
