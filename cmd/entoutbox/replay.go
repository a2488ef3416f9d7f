package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// replayOptions are the replay command's flags.
type replayOptions struct {
	databaseURL, table, brokerURL, logLevel string
	events                                  []string
	since, until                            timeFlag
	r                                       admin.Range
	opts                                    admin.ReplayOptions
	dryRun                                  bool
	databasesFile                           string
}

func newReplayCommand() *cobra.Command {
	o := &replayOptions{}
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
consumers see the event ids.

--dry-run reads the events as a replay would and prints, per topic they
would go to, how many and the first and last of them; it publishes nothing
and needs no broker. --limit replays the first N only. The exit status is 1
when nothing matches: nothing was replayed.`,
		Example: `  entoutbox replay --event order.paid --since 2026-11-01 --dry-run
  entoutbox replay --event order.paid --since 2026-11-01 --broker nats://127.0.0.1:4222
  entoutbox replay --event order.paid --since 72h --aggregate 42 --to-topic orders_rebuild --broker amqp://guest:guest@127.0.0.1:5672/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if f := cmd.Flags().Lookup("database-url"); o.databasesFile != "" && f.Changed && !fromGenericDatabaseURL(f) {
				return fmt.Errorf("%s cannot go with --databases-file: the database is --tenant's of the file; drop one of them", givenAs(f))
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	addDatabaseFlags(cmd, &o.databaseURL, &o.table)
	f := cmd.Flags()
	f.StringVar(&o.brokerURL, "broker", "", "broker URL: nats://, amqp://, redis://, kafka://, postgres:// or mem:// (env ENTOUTBOX_BROKER)")
	f.StringSliceVar(&o.events, "event", nil, "event name to replay, e.g. order.paid (repeat, or separate with commas)")
	f.Var(&o.since, "since", "replay events written at or after: RFC 3339, a date, or a duration ago (72h)")
	f.Var(&o.until, "until", "and before (default now)")
	f.StringVar(&o.r.AggregateID, "aggregate", "", "only this aggregate id")
	f.StringVar(&o.opts.ToTopic, "to-topic", "", "publish every event to this topic instead of its own")
	f.StringVar(&o.opts.TopicPrefix, "topic-prefix", "", "prepended to each event's own topic, as the relay's --topic-prefix")
	f.IntVar(&o.opts.BatchSize, "batch-size", 500, "events read and published at a time")
	f.IntVar(&o.opts.Limit, "limit", 0, "replay the first N events only (0: all)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print what would be replayed, and publish nothing")
	f.StringVar(&o.logLevel, "log-level", "warn", "the broker client's log level: debug, info, warn or error")
	f.StringVar(&o.opts.Tenant, "tenant", "", "put this tenant on every event (metadata "+events.MetaTenant+"), as the relay fleet does; "+
		"with --databases-file, also the tenant whose database is replayed")
	f.StringVar(&o.databasesFile, "databases-file", "", "the relay fleet's databases file: replay --tenant's database, "+
		"instead of --database-url")
	return cmd
}

// check refuses flags that cannot make a replay, before anything is opened.
func (o *replayOptions) check() error {
	switch {
	case len(o.events) == 0:
		return errors.New("replay needs --event (one or more event names)")
	case o.since.t.IsZero():
		return errors.New("replay needs --since: the first event's time (RFC 3339, a date, or a duration ago)")
	case !o.until.t.IsZero() && !o.until.t.After(o.since.t):
		return fmt.Errorf("--until %s is not after --since %s: no event is written in between", o.until.String(), o.since.String())
	case o.opts.ToTopic != "" && o.opts.TopicPrefix != "":
		return fmt.Errorf("--to-topic %q and --topic-prefix %q: --to-topic sends every event to that one topic, "+
			"unprefixed; give one", o.opts.ToTopic, o.opts.TopicPrefix)
	case o.opts.Limit < 0:
		return fmt.Errorf("--limit %d: must not be negative (0: all)", o.opts.Limit)
	case o.opts.BatchSize < 1:
		return fmt.Errorf("--batch-size %d: must be at least 1", o.opts.BatchSize)
	case o.brokerURL == "" && !o.dryRun:
		return errors.New("no broker: set --broker or ENTOUTBOX_BROKER (or --dry-run)")
	case o.databasesFile != "" && o.opts.Tenant == "":
		return errors.New("--databases-file needs --tenant: the tenant whose database is replayed")
	}
	if o.opts.Tenant != "" {
		if err := relay.CheckTenant(o.opts.Tenant); err != nil {
			return fmt.Errorf("--tenant: %w", err)
		}
	}
	return nil
}

// tenantDatabase is the URL of --tenant's database in --databases-file,
// its schema as the search_path.
func (o *replayOptions) tenantDatabase(ctx context.Context) (string, error) {
	tenants, err := fleet.Source{File: o.databasesFile}.Read(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range tenants {
		if t.Name == o.opts.Tenant {
			return t.URL(), nil
		}
	}
	return "", fmt.Errorf("--tenant %q is not a tenant of --databases-file %s", o.opts.Tenant, o.databasesFile)
}

// run replays the events the flags select, or with --dry-run prints what
// it would replay.
func (o *replayOptions) run(ctx context.Context, out io.Writer) error {
	o.r.Events, o.r.Since, o.r.Until = o.events, o.since.t, o.until.t
	logger, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	if o.databasesFile != "" {
		if o.databaseURL, err = o.tenantDatabase(ctx); err != nil {
			return err
		}
	}
	db, err := openPostgresDB(o.databaseURL, "replay")
	if err != nil {
		return err
	}
	defer db.Close()
	a, err := admin.Open(db, admin.Tables{Outbox: o.table})
	if err != nil {
		return err
	}
	if err := checkTables(ctx, db, o.table, ""); err != nil {
		return err
	}
	if o.dryRun {
		// The replay itself, its messages kept from any broker.
		var p plannedReplay
		n, err := a.Replay(ctx, &p, o.r, o.opts)
		if err != nil {
			return err
		}
		p.write(out, n, o.opts.Limit)
		if n == 0 {
			return errNothingToReplay
		}
		return nil
	}
	b, err := broker.Open(ctx, o.brokerURL, broker.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer b.Close()
	n, err := a.Replay(ctx, b.Publisher(), o.r, o.opts)
	fmt.Fprintf(out, "replayed %d events%s\n", n, limited(n, o.opts.Limit))
	if err == nil && n == 0 {
		return errNothingToReplay
	}
	return err
}

var errNothingToReplay = errors.New("replay: no retained delivered event matches --event, --since, --until and " +
	"--aggregate: nothing replayed (pending events are the relay's; --delete-delivered and cleanup remove delivered ones)")

// limited says a replay stopped at its limit.
func limited(n, limit int) string {
	if limit > 0 && n >= limit {
		return fmt.Sprintf(" (stopped at --limit %d)", limit)
	}
	return ""
}

// plannedReplay is a publisher that keeps what a replay publishes, per
// topic in the order published, and sends nothing.
type plannedReplay struct {
	topics []string
	by     map[string]*plannedTopic
}

type plannedTopic struct {
	count       int
	first, last *message.Message
}

func (p *plannedReplay) Publish(topic string, msgs ...*message.Message) error {
	if p.by == nil {
		p.by = map[string]*plannedTopic{}
	}
	t, ok := p.by[topic]
	if !ok {
		t = &plannedTopic{}
		p.by[topic] = t
		p.topics = append(p.topics, topic)
	}
	for _, m := range msgs {
		if t.first == nil {
			t.first = m
		}
		t.last = m
		t.count++
	}
	return nil
}

func (p *plannedReplay) Close() error { return nil }

// write prints what the replay would publish.
func (p *plannedReplay) write(w io.Writer, n, limit int) {
	fmt.Fprintf(w, "dry run: would replay %d events%s; nothing was published\n", n, limited(n, limit))
	for _, topic := range p.topics {
		t := p.by[topic]
		fmt.Fprintf(w, "  %d to %s\n", t.count, topic)
		fmt.Fprintf(w, "    first: %s\n", plannedEvent(t.first))
		if t.count > 1 {
			fmt.Fprintf(w, "    last:  %s\n", plannedEvent(t.last))
		}
	}
}

func plannedEvent(m *message.Message) string {
	md := m.Metadata
	return fmt.Sprintf("event %s (%s v%s, %s %s), written %s", m.UUID, md.Get(events.MetaEventName),
		md.Get(events.MetaEventVersion), md.Get(events.MetaAggregateType), md.Get(events.MetaAggregateID),
		md.Get(events.MetaCreatedAt))
}
