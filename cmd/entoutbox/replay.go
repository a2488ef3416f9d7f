package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/broker"
)

func newReplayCommand() *cobra.Command {
	var (
		databaseURL, table, brokerURL, logLevel string
		events                                  []string
		since, until                            timeFlag
		r                                       admin.Range
		opts                                    admin.ReplayOptions
	)
	cmd := &cobra.Command{
		Use:   "replay --event NAME --since T [--until T] [--aggregate ID] [--to-topic T] --broker URL",
		Short: "Publish retained delivered events again, with their original ids, in order",
		Long: `replay publishes the delivered events still retained in the outbox (the relay's
--delete-delivered and cleanup --delivered-retention remove them) straight to
the broker, as the relay does: the same message, the original event id, in the
order they were written, so per aggregate in order. Use it for a new consumer,
or a read model rebuilt with its processed events and its positions
(outbox_consumer_positions) cleared: it handles them in order, while a
consumer that handled them skips them as duplicates (and one that discarded an
event's dead letter skips that event).

--to-topic sends every event to that topic instead of its own. Pending events
are left to the relay; rows the WAL path delivered (delivered_at NULL) are
replayed too. The outbox table is --table (default outbox_events). Each replay
publishes under broker message ids of its own (on NATS JetStream the
Nats-Msg-Id), so that a broker that drops duplicates stores every replay;
consumers see the event ids.`,
		Example: `  entoutbox replay --event order.paid --since 2026-11-01 --broker nats://127.0.0.1:4222
  entoutbox replay --event order.paid --since 72h --aggregate 42 --to-topic orders_rebuild --broker amqp://guest:guest@127.0.0.1:5672/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case len(events) == 0:
				return errors.New("replay needs --event (one or more event names)")
			case since.t.IsZero():
				return errors.New("replay needs --since: the first event's time (RFC 3339, a date, or a duration ago)")
			case brokerURL == "":
				return errors.New("no broker: set --broker or ENTOUTBOX_BROKER")
			}
			r.Events, r.Since, r.Until = events, since.t, until.t
			logger, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			db, err := openDB(databaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			a, err := admin.Open(db, admin.Tables{Outbox: table})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b, err := broker.Open(ctx, brokerURL, broker.Options{Logger: logger})
			if err != nil {
				return err
			}
			defer b.Close()
			n, err := a.Replay(ctx, b.Publisher(), r, opts)
			fmt.Fprintf(cmd.OutOrStdout(), "replayed %d events\n", n)
			return err
		},
	}
	addDatabaseFlags(cmd, &databaseURL, &table)
	f := cmd.Flags()
	f.StringVar(&brokerURL, "broker", "", "broker URL: nats://, amqp://, redis://, kafka://, postgres:// or mem:// (env ENTOUTBOX_BROKER)")
	f.StringSliceVar(&events, "event", nil, "event name to replay, e.g. order.paid (repeat, or separate with commas)")
	f.Var(&since, "since", "replay events written at or after: RFC 3339, a date, or a duration ago (72h)")
	f.Var(&until, "until", "and before (default now)")
	f.StringVar(&r.AggregateID, "aggregate", "", "only this aggregate id")
	f.StringVar(&opts.ToTopic, "to-topic", "", "publish every event to this topic instead of its own")
	f.StringVar(&opts.TopicPrefix, "topic-prefix", "", "prepended to each event's own topic, as the relay's --topic-prefix")
	f.IntVar(&opts.BatchSize, "batch-size", 500, "events read and published at a time")
	f.StringVar(&logLevel, "log-level", "warn", "the broker client's log level: debug, info, warn or error")
	return cmd
}
