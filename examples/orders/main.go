// Command orders is the entoutbox example: it places orders and emits
// OrderPaid in the same ent transaction as the order change, then shows that
// a rolled-back transaction leaves no event behind.
//
//	go run ./examples/orders
//
// It reads DATABASE_URL (default: the local PostgreSQL) and works in its own
// PostgreSQL schema, "orders_example", which it drops and creates afresh on
// every run.
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
	"strconv"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/examples/orders/ent"
	"github.com/entoutbox/entoutbox/examples/orders/ent/order"
	"github.com/entoutbox/entoutbox/examples/orders/ent/outbox"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Config is what the example runs with.
type Config struct {
	DatabaseURL string
	Schema      string // PostgreSQL schema the example works in
	Orders      int    // orders to place
}

func main() {
	cfg := Config{DatabaseURL: os.Getenv("DATABASE_URL"), Schema: "orders_example"}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = defaultDatabaseURL
	}
	flag.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "PostgreSQL URL (env DATABASE_URL)")
	flag.StringVar(&cfg.Schema, "schema", cfg.Schema, "PostgreSQL schema to create and use")
	flag.IntVar(&cfg.Orders, "orders", 3, "number of orders to place")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, os.Stdout, cfg); err != nil {
		log.Fatalf("orders example: %v", err)
	}
}

// Run executes the example and writes what happens to out.
func Run(ctx context.Context, out io.Writer, cfg Config) error {
	client, err := openClient(ctx, cfg)
	if err != nil {
		return err
	}
	defer client.Close()

	// Each order is created and paid in one transaction with its event.
	for i := 1; i <= cfg.Orders; i++ {
		err := client.WithTx(ctx, func(tx *ent.Tx) error {
			o, err := tx.Order.Create().SetCustomer(fmt.Sprintf("customer-%d", i)).
				SetAmountCents(int64(1000 * i)).SetStatus(order.StatusPAID).Save(ctx)
			if err != nil {
				return err
			}
			return tx.Outbox.EmitOrderPaid(ctx, strconv.FormatInt(o.ID, 10),
				ent.OrderPaid{OrderID: o.ID, AmountCents: o.AmountCents, Currency: "EUR"})
		})
		if err != nil {
			return fmt.Errorf("placing order %d: %w", i, err)
		}
	}

	// A transaction that fails after emitting: the event goes with it.
	errDeclined := errors.New("card declined")
	err = client.WithTx(ctx, func(tx *ent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("customer-declined").SetAmountCents(999).Save(ctx)
		if err != nil {
			return err
		}
		if err := tx.Outbox.EmitOrderPaid(ctx, strconv.FormatInt(o.ID, 10),
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

	rows, err := client.Outbox.Query().Order(outbox.ByID()).All(ctx)
	if err != nil {
		return fmt.Errorf("reading the outbox: %w", err)
	}
	fmt.Fprintf(out, "outbox holds %d events:\n", len(rows))
	for _, r := range rows {
		fmt.Fprintf(out, "  %s v%d %s/%s -> %s %s\n", r.EventName, r.EventVersion, r.AggregateType, r.AggregateID, r.Topic, r.Payload)
	}
	return nil
}

// openClient connects, creates the example's schema and migrates it.
func openClient(ctx context.Context, cfg Config) (*ent.Client, error) {
	admin, err := sql.Open("pgx", cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	_, err = admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+quoteIdent(cfg.Schema)+` CASCADE; CREATE SCHEMA `+quoteIdent(cfg.Schema))
	admin.Close()
	if err != nil {
		return nil, fmt.Errorf("creating schema %s (is PostgreSQL running at %s?): %w", cfg.Schema, cfg.DatabaseURL, err)
	}
	db, err := sql.Open("pgx", withSearchPath(cfg.DatabaseURL, cfg.Schema))
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	if err := client.Schema.Create(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("migrating: %w", err)
	}
	return client, nil
}
