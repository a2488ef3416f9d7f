package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// BacklogConfig tells WatchBacklog what to sample.
type BacklogConfig struct {
	// Table and DeadLetterTable name the tables; "outbox_events" and
	// "outbox_dead_letters" (the schema package's defaults) when empty.
	Table, DeadLetterTable string
	// MinInterval is the least time between two samples: scrapes in
	// between see the last one. DefaultBacklogInterval when zero.
	MinInterval time.Duration
	// Timeout bounds one sample; DefaultBacklogTimeout when zero.
	Timeout time.Duration
	// MaxCount bounds the rows one sample counts, in each count:
	// entoutbox_outbox_pending_events and entoutbox_dead_letters stop
	// rising there (read it as "at least"). DefaultBacklogMaxCount when
	// zero.
	MaxCount int
}

// Defaults of BacklogConfig.
const (
	DefaultBacklogInterval = 5 * time.Second
	DefaultBacklogTimeout  = 3 * time.Second
	DefaultBacklogMaxCount = 100000
)

// WatchBacklog makes the backlog gauges (entoutbox_outbox_pending_events,
// entoutbox_outbox_oldest_pending_age_seconds, entoutbox_dead_letters,
// entoutbox_relays_holding_partitions) sample db on scrape, at most once
// per MinInterval. Each sample is a few index-backed queries whose cost is
// bounded by MaxCount: pending rows are counted over the outbox's partial
// index of undelivered rows, the oldest is looked up at its head. A sample
// that fails keeps the last values (see BacklogError). A second call
// replaces the first.
func (m *Metrics) WatchBacklog(db *sql.DB, cfg BacklogConfig) error {
	if m == nil {
		return nil
	}
	if db == nil {
		return errors.New("metrics: WatchBacklog: db is nil")
	}
	if cfg.Table == "" {
		cfg.Table = "outbox_events"
	}
	if cfg.DeadLetterTable == "" {
		cfg.DeadLetterTable = "outbox_dead_letters"
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
	m.backlog.watch(db, cfg)
	return nil
}

// BacklogError is the error of the last backlog sample, nil when it
// worked or none was taken.
func (m *Metrics) BacklogError() error {
	if m == nil {
		return nil
	}
	m.backlog.mu.Lock()
	defer m.backlog.mu.Unlock()
	return m.backlog.err
}

// backlog is one sample.
type backlog struct {
	pending     map[string]int64 // by topic
	oldest      time.Time        // zero when nothing is pending
	deadLetters map[string]int64 // by source: relay, consumer
	relays      int64
	at          time.Time // when the database said so
}

type backlogCollector struct {
	pendingDesc, ageDesc, deadDesc, relaysDesc *prometheus.Desc

	mu      sync.Mutex
	db      *sql.DB
	cfg     BacklogConfig
	last    *backlog
	sampled time.Time // when the last sample was tried
	err     error
	// topics is every topic a sample found pending: one with nothing
	// pending any more reports 0 rather than vanish.
	topics map[string]bool
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
			"Fast relays holding partitions under an unexpired lease (sampled).", nil, nil),
	}
}

func (c *backlogCollector) watch(db *sql.DB, cfg BacklogConfig) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.db, c.cfg, c.last, c.sampled, c.err, c.topics = db, cfg, nil, time.Time{}, nil, map[string]bool{}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pendingDesc
	ch <- c.ageDesc
	ch <- c.deadDesc
	ch <- c.relaysDesc
}

// Collect samples when the last sample is older than MinInterval, one
// scrape at a time, and reports the last sample that worked.
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
		if err == nil {
			for topic := range b.pending {
				c.topics[topic] = true
			}
			for topic := range c.topics {
				b.pending[topic] += 0
			}
			c.last = &b
		}
	}
	b := c.last
	if b == nil {
		return
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
}

// oldestWindow is how many of the first pending rows, in id order, the
// age of the oldest is taken from: ids follow the order of the inserts,
// created_at that of the transactions' starts, so the oldest by id is not
// always the oldest written.
const oldestWindow = 1000

// sampleBacklog reads one sample. The pending rows are read through the
// partial index on id WHERE delivered_at IS NULL, at most MaxCount of
// them; dead letters through the (source, created_at) index.
func sampleBacklog(ctx context.Context, db *sql.DB, cfg BacklogConfig) (backlog, error) {
	b := backlog{pending: map[string]int64{}, deadLetters: map[string]int64{}}
	t, dl := pgsql.QuoteIdent(cfg.Table), pgsql.QuoteIdent(cfg.DeadLetterTable)
	var (
		parts     bool
		discarded bool
		oldest    sql.NullTime
	)
	err := db.QueryRowContext(ctx, `SELECT now(), to_regclass($1) IS NOT NULL,
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'discarded_at'
			AND attnum > 0 AND NOT attisdropped),
		(SELECT min(created_at) FROM (SELECT created_at FROM `+t+` WHERE delivered_at IS NULL
			ORDER BY id LIMIT `+fmt.Sprint(oldestWindow)+`) o)`,
		pgsql.QuoteIdent(cfg.Table+"_partitions"), dl).Scan(&b.at, &parts, &discarded, &oldest)
	if err != nil {
		return backlog{}, fmt.Errorf("metrics: sampling the outbox backlog: %w", err)
	}
	b.oldest = oldest.Time
	limit := fmt.Sprint(cfg.MaxCount)
	rows, err := db.QueryContext(ctx, `SELECT topic, count(*) FROM (SELECT topic FROM `+t+
		` WHERE delivered_at IS NULL ORDER BY id LIMIT `+limit+`) p GROUP BY topic`)
	if err != nil {
		return backlog{}, fmt.Errorf("metrics: counting pending events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		var n int64
		if err := rows.Scan(&topic, &n); err != nil {
			return backlog{}, fmt.Errorf("metrics: counting pending events: %w", err)
		}
		b.pending[topic] = n
	}
	if err := rows.Err(); err != nil {
		return backlog{}, fmt.Errorf("metrics: counting pending events: %w", err)
	}
	// Open letters only: those an operator retried or discarded are
	// settled (the columns came together, with the dead-letter commands).
	notDiscarded := ""
	if discarded {
		notDiscarded = " AND discarded_at IS NULL AND retried_at IS NULL"
	}
	var relayDead, consumerDead int64
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM `+dl+` WHERE source = 'relay'`+notDiscarded+` LIMIT `+limit+`) r),
		(SELECT count(*) FROM (SELECT 1 FROM `+dl+` WHERE source <> 'relay'`+notDiscarded+` LIMIT `+limit+`) c)`).
		Scan(&relayDead, &consumerDead); err != nil {
		return backlog{}, fmt.Errorf("metrics: counting dead letters: %w", err)
	}
	b.deadLetters["relay"], b.deadLetters["consumer"] = relayDead, consumerDead
	if parts {
		if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT relay) FROM `+pgsql.QuoteIdent(cfg.Table+"_partitions")+
			` WHERE relay <> '' AND until > now()`).Scan(&b.relays); err != nil {
			return backlog{}, fmt.Errorf("metrics: counting relays: %w", err)
		}
	}
	return b, nil
}
