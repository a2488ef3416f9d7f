package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/broker"
)

func newRelayCommand() *cobra.Command {
	var (
		databaseURL, table, brokerURL, path, logLevel string
		cfg                                           relay.Config
	)
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Relay committed outbox events to a broker until SIGINT or SIGTERM",
		Long: `relay reads committed rows of the outbox table and publishes each event to its
topic on the broker, at least once and in order per aggregate. A row is marked
delivered only after the broker acknowledged it. On SIGINT or SIGTERM it
finishes in-flight publishes, records them, and exits.

Brokers, by URL:
  nats://127.0.0.1:4222                 NATS JetStream
  amqp://guest:guest@127.0.0.1:5672/    RabbitMQ
  redis://127.0.0.1:6379/0              Redis Streams
  kafka://host1:9092,host2:9092         Kafka
  postgres://...                        PostgreSQL itself (watermill-sql tables)
  mem://                                in-process (for tests and demos)`,
		Example: `  entoutbox relay --database-url postgres://postgres@127.0.0.1:5432/app --broker nats://127.0.0.1:4222
  ENTOUTBOX_DATABASE_URL=postgres://... ENTOUTBOX_BROKER=amqp://guest:guest@127.0.0.1:5672/ entoutbox relay`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if brokerURL == "" {
				return errors.New("no broker: set --broker or ENTOUTBOX_BROKER")
			}
			// The relay's live heap is small and bounded by --batch-size; a
			// rarer GC costs some 20 MB and saves about a sixth of its CPU
			// per event (bench). GOGC set in the environment wins.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(400)
			}
			logger, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			db, err := openDB(databaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			ctx := cmd.Context()
			b, err := broker.Open(ctx, brokerURL, broker.Options{Logger: logger})
			if err != nil {
				return err
			}
			defer b.Close()

			cfg.DB, cfg.Publisher, cfg.Table, cfg.Path, cfg.Logger = db, b.Publisher(), table, relay.Path(path), logger
			r, err := relay.New(cfg)
			if err != nil {
				return err
			}
			logger.Info("Relay started", watermill.LogFields{"broker": b.Scheme(), "path": path})
			if err := r.Run(ctx); err != nil {
				return err
			}
			logger.Info("Relay stopped", nil)
			return nil
		},
	}
	addDatabaseFlags(cmd, &databaseURL, &table)
	f := cmd.Flags()
	f.StringVar(&brokerURL, "broker", "", "broker URL: nats://, amqp://, redis://, kafka://, postgres:// or mem:// (env ENTOUTBOX_BROKER)")
	f.StringVar(&path, "path", string(relay.PathFast), "read path: fast (batched claims, concurrent publishes) or compatible (watermill-sql subscriber + forwarder)")
	f.StringVar(&cfg.ConsumerGroup, "consumer-group", "", "name of the relay's read position; relays sharing it share the work (default entoutbox_relay)")
	f.StringVar(&cfg.TopicPrefix, "topic-prefix", "", "prepended to every destination topic, e.g. staging_")
	f.StringVar(&cfg.DeadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	f.IntVar(&cfg.BatchSize, "batch-size", 0, "rows held at once (default 2000 fast, 100 compatible)")
	f.IntVar(&cfg.Concurrency, "concurrency", 256, "publishes in flight at once (fast path)")
	f.DurationVar(&cfg.Lease, "lease", 30*time.Second, "how long a relay owns its partitions unrenewed; a dead relay's go to the others after it (fast path)")
	f.IntVar(&cfg.Partitions, "partitions", 64, "parts the aggregates are hashed into and shared out among relays; the same on every relay of a table (fast path)")
	f.BoolVar(&cfg.PollOnly, "poll-only", false, "behind PgBouncer in transaction mode: only poll (no LISTEN), no liveness lock (a relay that dies is taken over when its lease ends)")
	f.BoolVar(&cfg.DeleteDelivered, "delete-delivered", false, "delete delivered rows instead of stamping delivered_at (fast path)")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", 10, "failed publishes of one event before it goes to the dead letters (fast path)")
	f.StringVar(&cfg.RelayID, "relay-id", "", "name of this relay in the partition table (default random)")
	f.DurationVar(&cfg.PollInterval, "poll-interval", time.Second, "how often an idle relay looks for new rows without a notification")
	f.DurationVar(&cfg.RetryInterval, "retry-interval", time.Second, "wait before a failed publish is tried again (doubling on the fast path)")
	f.DurationVar(&cfg.CloseTimeout, "close-timeout", 30*time.Second, "how long shutdown waits for in-flight publishes")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

func newLogger(level string) (watermill.LoggerAdapter, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))), nil
}
