package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/tracing"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
	"github.com/entoutbox/entoutbox/relay/internal/fastpath"
	"github.com/entoutbox/entoutbox/relay/internal/schedule"
	"github.com/entoutbox/entoutbox/relay/internal/walpath"
)

// Path is how the relay reads committed rows.
type Path string

const (
	// PathFast, the default, reads with this package's Subscriber: batch
	// claims of the partitions a relay owns, many publishes in flight with
	// at most one per aggregate, LISTEN/NOTIFY wake-ups, batched acks,
	// several replicas sharing the partitions.
	PathFast Path = "fast"
	// PathCompatible reads with the stock watermill-sql subscriber and
	// feeds Watermill's forwarder component unchanged, one message at a
	// time. On PostgreSQL it reads strictly in commit order, and waits for
	// every older transaction on the server to end (snapshot xmin) before
	// it reads a row. On MySQL it reads the undelivered rows in id order
	// from the first at each read, so a row that commits after a later id
	// is read next time; an aggregate's rows keep their order.
	PathCompatible Path = "compatible"
	// PathWAL reads committed inserts from PostgreSQL logical replication
	// (a pgoutput slot and a publication of the table), in commit order,
	// at most one publish per aggregate in flight. No polling, no claims,
	// no write per delivered row: the slot's confirmed position is the
	// delivery state. One relay streams a slot; others wait as standbys.
	PathWAL Path = "wal"
	// PathPoll is the path on SQLite and MySQL, and their default: it
	// polls the undelivered rows in id order (PollInterval; neither has
	// LISTEN), at most one publish per aggregate in flight. On SQLite one
	// relay at a time, holding the outbox's lease (SQLite has no row locks
	// to share the rows by): another relay on the same file waits, and
	// takes over when it stops or within seconds of its death. On MySQL
	// relays share the outbox, each leasing its share of 32 partitions of
	// the rows by aggregate.
	PathPoll Path = "poll"
)

func checkTableName(table string) error {
	if err := outboxdb.CheckName(table); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// checkIdentifiers refuses a scheduled or sequence table name (fields
// ScheduledTable and SequenceTable after prefix) PostgreSQL would cut.
func checkIdentifiers(prefix, scheduled, sequence string) error {
	for _, n := range []struct{ field, name string }{{"ScheduledTable", scheduled}, {"SequenceTable", sequence}} {
		if len(n.name) > maxIdentifier {
			return fmt.Errorf("relay: %s%s %q is %d bytes, at most %d (PostgreSQL identifiers hold 63 bytes)",
				prefix, n.field, n.name, len(n.name), maxIdentifier)
		}
	}
	return nil
}

// maxIdentifier is the longest name PostgreSQL keeps whole.
const maxIdentifier = 63

// checkTables refuses an outbox table that does not exist or is not one,
// and a dead-letter table that does not exist or lacks a column the relay
// writes.
func checkTables(ctx context.Context, db *sql.DB, t outboxdb.Tables) error {
	if err := t.Check(ctx, db); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if _, err := t.EnsurePendingIndex(ctx, db); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// Relay moves committed outbox rows to a Watermill publisher, at least once.
// A row counts as delivered (delivered_at is set; on the WAL path, the
// slot's confirmed position moves past it) only after the publisher
// returned without error, which for the broker publishers means the broker
// acknowledged it.
type Relay struct {
	cfg    Config
	tracer *tracing.Tracer
	// fast is the fast path's source while it runs.
	fast atomic.Pointer[fastpath.Source]
	// wal is the WAL path's source while it runs.
	wal atomic.Pointer[walpath.Source]
	// fastHooks go to its fast source, slotCreating to its WAL source;
	// zero outside this package's tests (see export_test.go).
	fastHooks    fastpath.Hooks
	slotCreating func()
	// promoteBatch bounds its promotions (zero: the default); set by
	// this package's tests.
	promoteBatch int
}

// New checks cfg and returns a relay; Run starts it.
func New(cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Relay{cfg: cfg, tracer: tracing.New(cfg.TracerProvider)}, nil
}

// Run relays until ctx is done, then stops gracefully: in-flight publishes
// finish (up to CloseTimeout), their rows are marked delivered, and the
// database connections it held are released. It returns nil after a
// shutdown asked for by ctx.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.cfg.DB.PingContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("relay: database is not reachable: %w", err)
	}
	if err := checkTables(ctx, r.cfg.DB, r.cfg.tables()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	tables, promoting, err := schedule.Check(ctx, r.cfg.DB, r.cfg.scheduledTables())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("relay: %w", err)
	}
	r.logStart(ctx, promoting)
	if promoting {
		defer sharePromoter(r.cfg.DB, r.cfg.promoterListenDB(), tables, r.cfg.Logger, r.cfg.Metrics, r.promoteBatch)()
	}
	switch r.cfg.Path {
	case PathCompatible:
		err = r.runCompatible(ctx)
	case PathWAL:
		err = r.runWAL(ctx)
	case PathPoll:
		err = r.runPoll(ctx)
	default:
		err = r.runFast(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting
	}
	return err
}

// logStart says, at info, what the relay reads and where it publishes: a
// consumer given another topic prefix reads topics no one publishes to,
// and its own start line ("Consumer subscribing") next to this one shows
// it. Topics are known as rows come; those of the last rows are named.
// It says whether the relay moves scheduled events into the outbox when
// they are due (promoting: their table exists).
func (r *Relay) logStart(ctx context.Context, promoting bool) {
	fields := watermill.LogFields{"path": r.cfg.Path, "table": r.cfg.Table, "topic_prefix": r.cfg.TopicPrefix,
		"publishes_to": r.cfg.TopicPrefix + "<the event's topic>", "scheduled_table": r.cfg.ScheduledTable,
		"promotes_scheduled": promoting}
	if r.cfg.Tenant != "" {
		fields["tenant"] = r.cfg.Tenant
	}
	topics, err := r.cfg.tables().RecentTopics(ctx, r.cfg.DB, startTopicRows)
	if err != nil {
		fields["recent_topics_error"] = err.Error()
	} else {
		for i, t := range topics {
			topics[i] = r.cfg.TopicPrefix + t
		}
		fields["recent_topics"] = strings.Join(topics, ",")
	}
	r.cfg.Logger.Info("Relay starting", fields)
}

// startTopicRows is how many of the last rows the start line takes the
// topics of.
const startTopicRows = 1000

// newEngine is the engine of the relay's read path: concurrency
// publishes in flight at most, failures decided by policy.
func (r *Relay) newEngine(concurrency int, policy engine.Policy) *engine.Engine {
	return engine.New(r.publishSettings(), concurrency, policy)
}

// publishSettings is how the relay publishes, on every path.
func (r *Relay) publishSettings() engine.Settings {
	return engine.Settings{Publisher: r.cfg.Publisher, Logger: r.cfg.Logger, TopicPrefix: r.cfg.TopicPrefix,
		Tracer: r.tracer, System: r.messagingSystem(), Metrics: r.cfg.Metrics}
}

// messagingSystem is the messaging.system attribute of the send spans.
func (r *Relay) messagingSystem() string {
	if r.cfg.MessagingSystem != "" {
		return r.cfg.MessagingSystem
	}
	if s, ok := r.cfg.Publisher.(interface{ Scheme() string }); ok {
		return s.Scheme()
	}
	return "watermill"
}
