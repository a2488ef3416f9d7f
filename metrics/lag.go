package metrics

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/entoutbox/entoutbox/internal/lag"
)

// DefaultLagTimeout is BacklogConfig.LagTimeout's default.
const DefaultLagTimeout = time.Minute

// lagCostFactor spaces the lag samples: the next starts no sooner than
// this many times the last one's duration after it, so that sampling takes
// at most a twentieth of one database connection's time however many
// aggregates there are.
const lagCostFactor = 20

// lagCollector reports the consumer lag gauges. A sample reads every
// aggregate's counter and position (package lag), which a large table
// makes slow: it runs beside the scrapes rather than in one, and a scrape
// reports the last sample, none while it failed (the database could not
// be read: its last values are not the truth now).
type lagCollector struct {
	eventsDesc, oldestDesc *prometheus.Desc

	mu          sync.Mutex
	db          *sql.DB
	cfg         lag.Config
	minInterval time.Duration
	timeout     time.Duration
	watch       int // counts WatchBacklog calls: a sample of an earlier one is dropped
	running     bool
	next        time.Time // the next sample starts at a scrape from then on
	last        *lag.Reading
	err         error
}

func newLagCollector() *lagCollector {
	return &lagCollector{
		eventsDesc: prometheus.NewDesc("entoutbox_consumer_lag_events",
			"Numbered events a consumer has not handled yet, by consumer and topic: per aggregate, its last number "+
				"less the consumer's position, events not yet relayed included (sampled).",
			[]string{"consumer", "topic"}, nil),
		oldestDesc: prometheus.NewDesc("entoutbox_consumer_lag_oldest_seconds",
			"How long the oldest event a consumer has not handled has waited since it was written, by consumer and "+
				"topic; 0 when none; a lower bound when some of them are no longer in the outbox or beyond the rows "+
				"a sample reads; absent while none of them is found (sampled).",
			[]string{"consumer", "topic"}, nil),
	}
}

func (c *lagCollector) watchLag(db *sql.DB, cfg BacklogConfig) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.db = db
	c.cfg = lag.Config{Outbox: cfg.Table, Sequences: cfg.SequenceTable, Positions: cfg.PositionTable, MaxRows: cfg.MaxCount}
	c.minInterval, c.timeout = cfg.MinInterval, cfg.LagTimeout
	c.watch++
	c.running, c.next, c.last, c.err = false, time.Time{}, nil, nil
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.eventsDesc
	ch <- c.oldestDesc
}

// Collect starts a sample when one is due and none runs, and reports the
// last one unless it failed. A consumer name or topic gone from the positions is gone from
// the sample, and so are its series.
func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		return
	}
	if !c.running && !time.Now().Before(c.next) {
		c.running = true
		go c.sample(c.db, c.cfg, c.timeout, c.watch)
	}
	if c.last == nil || c.err != nil {
		return
	}
	for _, l := range c.last.Lags {
		ch <- prometheus.MustNewConstMetric(c.eventsDesc, prometheus.GaugeValue, float64(l.Events), l.Consumer, l.Topic)
		switch {
		case l.Events == 0:
			ch <- prometheus.MustNewConstMetric(c.oldestDesc, prometheus.GaugeValue, 0, l.Consumer, l.Topic)
		case l.Located > 0:
			ch <- prometheus.MustNewConstMetric(c.oldestDesc, prometheus.GaugeValue,
				max(c.last.At.Sub(l.Oldest).Seconds(), 0), l.Consumer, l.Topic)
		}
	}
}

func (c *lagCollector) sample(db *sql.DB, cfg lag.Config, timeout time.Duration, watch int) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	r, err := lag.Read(ctx, db, cfg)
	cancel()
	took := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	if watch != c.watch {
		return
	}
	c.running = false
	c.next = start.Add(max(c.minInterval, lagCostFactor*took))
	c.err = err
	if err == nil {
		c.last = &r
	}
}

func (c *lagCollector) lastErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
