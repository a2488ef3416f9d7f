package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// BacklogConfig tells WatchBacklog what to sample.
type BacklogConfig struct {
	// Table and DeadLetterTable name the tables; "outbox_events" and
	// "outbox_dead_letters" (the schema package's defaults) when empty.
	Table, DeadLetterTable string
	// PositionTable names the consumers' positions (schema.ConsumerPosition),
	// "outbox_consumer_positions" when empty; a database without it
	// reports no held aggregates. With SequenceTable, the aggregates'
	// counters (schema.AggregateSequence, "outbox_aggregate_sequences"
	// when empty), it gives the consumer lag; a database without either
	// reports none.
	PositionTable, SequenceTable string
	// ScheduledTable names the scheduled events (schema.ScheduledEvent),
	// "outbox_scheduled_events" when empty; a database without it reports
	// no scheduled gauges.
	ScheduledTable string
	// MinInterval is the least time between two samples: scrapes in
	// between see the last one. DefaultBacklogInterval when zero.
	MinInterval time.Duration
	// Timeout bounds one sample; DefaultBacklogTimeout when zero.
	Timeout time.Duration
	// MaxCount bounds the rows one sample counts, in each count:
	// entoutbox_outbox_pending_events and entoutbox_dead_letters stop
	// rising there (read it as "at least"); and the outbox rows a lag
	// sample reads to find the oldest event a consumer has not handled.
	// DefaultBacklogMaxCount when zero.
	MaxCount int
	// LagTimeout bounds one lag sample; DefaultLagTimeout when zero.
	LagTimeout time.Duration
}

// Defaults of BacklogConfig.
const (
	DefaultBacklogInterval = 5 * time.Second
	DefaultBacklogTimeout  = 3 * time.Second
	DefaultBacklogMaxCount = 100000
)

// WatchBacklog makes the backlog gauges (entoutbox_outbox_pending_events,
// entoutbox_outbox_oldest_pending_age_seconds, entoutbox_dead_letters,
// entoutbox_relays_holding_partitions, and the scheduled events' gauges
// entoutbox_scheduled_waiting_events, _overdue_events, _overdue_seconds
// and _cancelled_events) sample db on scrape, at most once
// per MinInterval. Each sample is a few index-backed queries whose cost is
// bounded by MaxCount: the first MaxCount pending rows are counted, and
// the oldest of them found, over the outbox's partial index of undelivered
// rows (package outboxdb, as entoutbox status reads them). A second call
// replaces the first.
//
// db is PostgreSQL or MySQL (MariaDB too). MySQL has no partial index:
// the pending rows are found by walking the primary key past the delivered
// rows kept, as the poll relay finds them;
// entoutbox_relays_holding_partitions counts the poll relays there, and
// there are no WAL slots. On SQLite
// WatchBacklog returns an error.
//
// While the database cannot be read, the gauges are absent rather than
// frozen at their last values: a sample that fails drops them until one
// works again. entoutbox_backlog_sample_age_seconds, the time since the
// last sample that worked (since this call while none has), then grows,
// and entoutbox_backlog_sample_errors_total counts the failures
// (BacklogError says why): alert on them, as the rules in deploy/ do, so
// that a relay that cannot read its database is not taken for one with
// nothing to do.
//
// The consumer lag gauges (entoutbox_consumer_lag_events,
// entoutbox_consumer_lag_oldest_seconds) are sampled beside the scrapes:
// their count reads every aggregate's counter and position, so a sample
// starts no sooner than MinInterval, nor than twenty times the last one's
// duration, after the last, and a scrape reports the last sample while it
// worked (none while the last one failed).
func (m *Metrics) WatchBacklog(db *sql.DB, cfg BacklogConfig) error {
	if m == nil {
		return nil
	}
	if db == nil {
		return errors.New("metrics: WatchBacklog: db is nil")
	}
	if outboxdb.DialectOfDB(db) == outboxdb.SQLite {
		return errors.New("metrics: WatchBacklog samples PostgreSQL and MySQL; on SQLite not yet")
	}
	defaults := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	cfg.Table, cfg.DeadLetterTable = defaults.Outbox, defaults.DeadLetters
	if cfg.PositionTable == "" {
		cfg.PositionTable = defaults.Positions
	}
	if cfg.ScheduledTable == "" {
		cfg.ScheduledTable = defaults.Scheduled
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultBacklogInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultBacklogTimeout
	}
	if cfg.MaxCount <= 0 {
		cfg.MaxCount = DefaultBacklogMaxCount
	}
	if cfg.LagTimeout <= 0 {
		cfg.LagTimeout = DefaultLagTimeout
	}
	m.backlog.watch(db, cfg)
	m.lag.watchLag(db, cfg)
	return nil
}

// BacklogError is the error of the last backlog sample and of the last
// lag sample, nil when they worked or none was taken.
func (m *Metrics) BacklogError() error {
	if m == nil {
		return nil
	}
	m.backlog.mu.Lock()
	err := m.backlog.err
	m.backlog.mu.Unlock()
	return errors.Join(err, m.lag.lastErr())
}

// backlog is one sample.
type backlog struct {
	pending     map[string]int64 // by topic
	oldest      time.Time        // zero when nothing is pending
	deadLetters map[string]int64 // by source: relay, consumer
	relays      int64
	slots       []walSlot        // the WAL relays' replication slots
	held        map[string]int64 // aggregates held behind a dead letter, by consumer
	at          time.Time        // when the database said so
	scheduled   outboxdb.Scheduled
}

// walSlot is a WAL relay's replication slot as sampled.
type walSlot struct {
	name     string
	active   bool
	retained int64 // bytes of WAL the server keeps for it
}

type backlogCollector struct {
	pendingDesc, ageDesc, deadDesc, relaysDesc *prometheus.Desc
	walRetainedDesc, walActiveDesc             *prometheus.Desc
	heldDesc                                   *prometheus.Desc
	scheduledWaitingDesc, scheduledOverdueDesc *prometheus.Desc
	scheduledOverdueAgeDesc                    *prometheus.Desc
	scheduledCancelledDesc                     *prometheus.Desc
	sampleAgeDesc, sampleErrorsDesc            *prometheus.Desc

	mu      sync.Mutex
	db      *sql.DB
	cfg     BacklogConfig
	last    *backlog
	sampled time.Time // when the last sample was tried
	worked  time.Time // when the last sample that worked was taken, or WatchBacklog called
	err     error     // the last sample's: its gauges are not reported while set
	errors  int64     // samples that failed, in every WatchBacklog's lifetime
	// topics is every topic a sample found pending: one with nothing
	// pending any more reports 0 rather than vanish; consumers likewise,
	// for held aggregates.
	topics    map[string]bool
	consumers map[string]bool
}

func newBacklogCollector() *backlogCollector {
	return &backlogCollector{
		pendingDesc: prometheus.NewDesc("entoutbox_outbox_pending_events",
			"Committed outbox events not yet delivered, by topic (sampled; stops at the sample's MaxCount).",
			[]string{"topic"}, nil),
		ageDesc: prometheus.NewDesc("entoutbox_outbox_oldest_pending_age_seconds",
			"How long the oldest pending outbox event has waited; 0 when nothing is pending (sampled).", nil, nil),
		deadDesc: prometheus.NewDesc("entoutbox_dead_letters",
			"Open dead letters (neither retried nor discarded), by source (relay, consumer) (sampled).",
			[]string{"source"}, nil),
		relaysDesc: prometheus.NewDesc("entoutbox_relays_holding_partitions",
			"Relays holding partitions under an unexpired lease: the fast relays on PostgreSQL, the poll relays on MySQL "+
				"(sampled).", nil, nil),
		walRetainedDesc: prometheus.NewDesc("entoutbox_wal_slot_retained_bytes",
			"WAL the server keeps for a WAL relay's replication slot, by slot; it grows without bound while no relay "+
				"streams the slot (sampled).", []string{"slot"}, nil),
		walActiveDesc: prometheus.NewDesc("entoutbox_wal_slot_active",
			"1 when a WAL relay streams the replication slot, 0 when none does (sampled).", []string{"slot"}, nil),
		heldDesc: prometheus.NewDesc("entoutbox_consumer_held_aggregates",
			"Aggregates a consumer holds behind a dead letter: their later events wait for its repair, by consumer "+
				"(sampled; stops at the sample's MaxCount).", []string{"consumer"}, nil),
		scheduledWaitingDesc: prometheus.NewDesc("entoutbox_scheduled_waiting_events",
			"Scheduled events (events.DeliverAt) not yet moved to the outbox nor cancelled, the overdue ones included "+
				"(sampled; stops at the sample's MaxCount).", nil, nil),
		scheduledOverdueDesc: prometheus.NewDesc("entoutbox_scheduled_overdue_events",
			"Scheduled events due by the database's clock and not yet moved to the outbox: a relay moves them within "+
				"moments, so a count that stays above 0 tells none does (sampled; stops at the sample's MaxCount).", nil, nil),
		scheduledOverdueAgeDesc: prometheus.NewDesc("entoutbox_scheduled_overdue_seconds",
			"How long the earliest scheduled event not yet moved to the outbox has been due, by the database's clock; "+
				"0 when none is due (sampled).", nil, nil),
		scheduledCancelledDesc: prometheus.NewDesc("entoutbox_scheduled_cancelled_events",
			"Cancelled scheduled events, kept until cleanup removes them (sampled; stops at the sample's MaxCount).", nil, nil),
		sampleAgeDesc: prometheus.NewDesc("entoutbox_backlog_sample_age_seconds",
			"Seconds since the backlog gauges were last read from the database (since the watch started while no read "+
				"worked). It grows while the database cannot be read, and the backlog gauges are then absent.", nil, nil),
		sampleErrorsDesc: prometheus.NewDesc("entoutbox_backlog_sample_errors_total",
			"Backlog samples that failed: the database could not be read.", nil, nil),
	}
}

func (c *backlogCollector) watch(db *sql.DB, cfg BacklogConfig) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.db, c.cfg, c.last, c.sampled, c.worked, c.err = db, cfg, nil, time.Time{}, time.Now(), nil
	c.topics, c.consumers = map[string]bool{}, map[string]bool{}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pendingDesc
	ch <- c.ageDesc
	ch <- c.deadDesc
	ch <- c.relaysDesc
	ch <- c.walRetainedDesc
	ch <- c.walActiveDesc
	ch <- c.heldDesc
	ch <- c.scheduledWaitingDesc
	ch <- c.scheduledOverdueDesc
	ch <- c.scheduledOverdueAgeDesc
	ch <- c.scheduledCancelledDesc
	ch <- c.sampleAgeDesc
	ch <- c.sampleErrorsDesc
}

// Collect samples when the last sample is older than MinInterval, one
// scrape at a time, and reports the sample's age and failures, and the
// last sample unless it failed.
func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		return
	}
	if time.Since(c.sampled) >= c.cfg.MinInterval {
		c.sampled = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
		b, err := sampleBacklog(ctx, c.db, c.cfg)
		cancel()
		c.err = err
		if err != nil {
			c.errors++
		} else {
			c.worked = c.sampled // this clock, as time.Since reads it, not the database's
			for topic := range b.pending {
				c.topics[topic] = true
			}
			for topic := range c.topics {
				b.pending[topic] += 0
			}
			for consumer := range b.held {
				c.consumers[consumer] = true
			}
			for consumer := range c.consumers {
				b.held[consumer] += 0
			}
			c.last = &b
		}
	}
	ch <- prometheus.MustNewConstMetric(c.sampleAgeDesc, prometheus.GaugeValue, max(time.Since(c.worked).Seconds(), 0))
	ch <- prometheus.MustNewConstMetric(c.sampleErrorsDesc, prometheus.CounterValue, float64(c.errors))
	b := c.last
	if b == nil || c.err != nil {
		return // the database could not be read: its last values are not the truth now
	}
	for topic, n := range b.pending {
		ch <- prometheus.MustNewConstMetric(c.pendingDesc, prometheus.GaugeValue, float64(n), topic)
	}
	age := 0.0
	if !b.oldest.IsZero() {
		age = max(b.at.Sub(b.oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.ageDesc, prometheus.GaugeValue, age)
	for _, source := range []string{"relay", "consumer"} {
		ch <- prometheus.MustNewConstMetric(c.deadDesc, prometheus.GaugeValue, float64(b.deadLetters[source]), source)
	}
	ch <- prometheus.MustNewConstMetric(c.relaysDesc, prometheus.GaugeValue, float64(b.relays))
	for _, s := range b.slots {
		active := 0.0
		if s.active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(c.walRetainedDesc, prometheus.GaugeValue, float64(s.retained), s.name)
		ch <- prometheus.MustNewConstMetric(c.walActiveDesc, prometheus.GaugeValue, active, s.name)
	}
	for consumer, n := range b.held {
		ch <- prometheus.MustNewConstMetric(c.heldDesc, prometheus.GaugeValue, float64(n), consumer)
	}
	if s := b.scheduled; s.Exists {
		ch <- prometheus.MustNewConstMetric(c.scheduledWaitingDesc, prometheus.GaugeValue, float64(s.Waiting))
		ch <- prometheus.MustNewConstMetric(c.scheduledOverdueDesc, prometheus.GaugeValue, float64(s.Overdue))
		ch <- prometheus.MustNewConstMetric(c.scheduledOverdueAgeDesc, prometheus.GaugeValue, s.OverdueBy().Seconds())
		ch <- prometheus.MustNewConstMetric(c.scheduledCancelledDesc, prometheus.GaugeValue, float64(s.Cancelled))
	}
}

// sampleBacklog reads one sample: the pending rows through the outbox's
// partial index on id WHERE delivered_at IS NULL, at most MaxCount of
// them; dead letters through the (source, created_at) index, at most
// MaxCount of each source.
func sampleBacklog(ctx context.Context, db *sql.DB, cfg BacklogConfig) (backlog, error) {
	t := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	t.Positions, t.Dialect = cfg.PositionTable, outboxdb.DialectOfDB(db)
	p, err := outboxdb.ReadPending(ctx, db, t, cfg.MaxCount)
	if err != nil {
		return backlog{}, fmt.Errorf("metrics: sampling the outbox backlog: %w", err)
	}
	b := backlog{pending: map[string]int64{}, oldest: p.Oldest, at: p.At}
	for _, tp := range p.Topics {
		b.pending[tp.Topic] = tp.Pending
	}
	open, err := outboxdb.ReadOpenDeadLetters(ctx, db, t, cfg.MaxCount)
	if err != nil {
		return backlog{}, fmt.Errorf("metrics: %w", err)
	}
	b.deadLetters = map[string]int64{"relay": open.Relay, "consumer": open.Consumer}
	_, shares, err := outboxdb.ReadShares(ctx, db, t)
	if err != nil {
		return backlog{}, fmt.Errorf("metrics: counting relays: %w", err)
	}
	holding := map[string]bool{}
	for _, s := range shares {
		if !s.Lapsed {
			holding[s.Relay] = true
		}
	}
	b.relays = int64(len(holding))
	slots, err := outboxdb.ReadSlots(ctx, db, t)
	if err != nil {
		return backlog{}, fmt.Errorf("metrics: %w", err)
	}
	for _, s := range slots {
		if s.Exists { // a dropped slot retains nothing
			b.slots = append(b.slots, walSlot{name: s.Slot, active: s.Active, retained: s.RetainedBytes})
		}
	}
	if b.held, err = sampleHeld(ctx, db, t, cfg.MaxCount); err != nil {
		return backlog{}, err
	}
	t.Scheduled = cfg.ScheduledTable
	if b.scheduled, err = outboxdb.ReadScheduled(ctx, db, t, cfg.MaxCount); err != nil {
		return backlog{}, fmt.Errorf("metrics: %w", err)
	}
	return b, nil
}

// sampleHeld counts the aggregates each consumer holds behind a dead
// letter, through the positions' partial index of held ones, at most
// MaxCount of them.
func sampleHeld(ctx context.Context, db *sql.DB, t outboxdb.Tables, maxCount int) (map[string]int64, error) {
	held := map[string]int64{}
	exists, err := t.TableExists(ctx, db, t.Positions)
	if err != nil {
		return nil, fmt.Errorf("metrics: looking for the consumer positions: %w", err)
	}
	if !exists {
		return held, nil
	}
	held, err = outboxdb.CountHeld(ctx, db, t, maxCount)
	if err != nil {
		return nil, fmt.Errorf("metrics: counting held aggregates: %w", err)
	}
	return held, nil
}
