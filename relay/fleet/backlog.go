package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/tenantread"
)

// BacklogConfig tells WatchBacklogs how to read the tenants' backlogs.
type BacklogConfig struct {
	// Interval is the time between two reads of every tenant;
	// DefaultBacklogInterval when zero.
	Interval time.Duration
	// Timeout bounds the read of one database URL's tenants (all the
	// schemas of that URL); DefaultBacklogTimeout when zero.
	Timeout time.Duration
	// MaxCount bounds the rows each count walks, per tenant: the pending
	// events, the open dead letters of each source and the held
	// aggregates stop rising there (read them as "at least");
	// outboxdb.DefaultMaxRows when zero.
	MaxCount int
}

// Defaults of BacklogConfig.
const (
	DefaultBacklogInterval = 15 * time.Second
	DefaultBacklogTimeout  = 10 * time.Second
)

// tenantBacklog is one tenant's last read.
type tenantBacklog struct {
	err       error     // the last read's; its figures are not reported while set
	read      bool      // a read worked: the figures below are its
	worked    time.Time // when the last read that worked was taken, or the tenant was first seen
	pending   int64
	oldestAge float64 // seconds, by the database's clock at the read; 0 when nothing is pending
	dead      int64   // open dead letters, the relay's and the consumers'
	held      int64   // aggregates held behind a dead letter, all consumers
}

// backlogCollector reads the backlog of every tenant of the fleet on its
// own clock, one database URL after the other on one connection opened
// for the read and closed after it, and serves the last reads under the
// tenant labels of tenantMetrics.
type backlogCollector struct {
	f   *Fleet
	cfg BacklogConfig

	pendingDesc, ageDesc, deadDesc, heldDesc *prometheus.Desc
	unreadDesc, sampleAgeDesc                *prometheus.Desc

	mu      sync.Mutex
	tenants map[string]*tenantBacklog
}

// WatchBacklogs serves, with the fleet's metrics (Config.Metrics), the
// backlog of each tenant: entoutbox_fleet_tenant_pending_events,
// _oldest_pending_age_seconds, _dead_letters and _held_aggregates, and
// the state of their reads, entoutbox_fleet_tenant_backlog_unread and
// _backlog_sample_age_seconds; under the tenant labels of the relays'
// metrics (OtherTenants sums the counts of the rest, and takes the
// largest age). It reads them every cfg.Interval until ctx ends, in a
// goroutine of its own.
//
// A read holds no pool per tenant: the tenants of one database URL
// (schema-per-tenant) are read together on one connection opened for
// the read and closed after it, one database after the other, as the
// prober reads the parked tenants. A tenant that cannot be read has no
// backlog gauges until a read works again, and counts as unread: its
// last figures are not served as if they were fresh.
func (f *Fleet) WatchBacklogs(ctx context.Context, cfg BacklogConfig) error {
	if f.cfg.Metrics == nil {
		return errors.New("fleet: WatchBacklogs serves the backlog with the fleet's metrics: Config.Metrics is nil")
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.MaxCount < 0 {
		return errors.New("fleet: BacklogConfig.Interval, Timeout and MaxCount must not be negative")
	}
	cfg.Interval = cmpOr(cfg.Interval, DefaultBacklogInterval)
	cfg.Timeout = cmpOr(cfg.Timeout, DefaultBacklogTimeout)
	cfg.MaxCount = cmpOr(cfg.MaxCount, outboxdb.DefaultMaxRows)
	c := newBacklogCollector(f, cfg)
	if err := f.cfg.Metrics.Register(c); err != nil {
		return fmt.Errorf("fleet: registering the tenants' backlog: %w", err)
	}
	go c.run(ctx)
	return nil
}

func newBacklogCollector(f *Fleet, cfg BacklogConfig) *backlogCollector {
	tenant := []string{"tenant"}
	return &backlogCollector{f: f, cfg: cfg, tenants: map[string]*tenantBacklog{},
		pendingDesc: prometheus.NewDesc("entoutbox_fleet_tenant_pending_events",
			"The tenant's committed outbox events not yet delivered (read every few seconds; stops at the read's bound). "+
				"Summed past the tenants' bound over the tenants read.", tenant, nil),
		ageDesc: prometheus.NewDesc("entoutbox_fleet_tenant_oldest_pending_age_seconds",
			"How long the tenant's oldest pending event had waited at the last read; 0 when nothing is pending. "+
				"The largest past the tenants' bound.", tenant, nil),
		deadDesc: prometheus.NewDesc("entoutbox_fleet_tenant_dead_letters",
			"The tenant's open dead letters (neither retried nor discarded), the relay's and the consumers'. "+
				"Summed past the tenants' bound over the tenants read.", tenant, nil),
		heldDesc: prometheus.NewDesc("entoutbox_fleet_tenant_held_aggregates",
			"Aggregates the tenant's consumers hold behind a dead letter. Summed past the tenants' bound over the tenants read.",
			tenant, nil),
		unreadDesc: prometheus.NewDesc("entoutbox_fleet_tenant_backlog_unread",
			"1 when the tenant's last backlog read failed (its backlog gauges are then absent), else 0; "+
				"past the tenants' bound, how many of those tenants it failed for.", tenant, nil),
		sampleAgeDesc: prometheus.NewDesc("entoutbox_fleet_tenant_backlog_sample_age_seconds",
			"Seconds since the tenant's backlog was last read (since it was first seen while no read worked). "+
				"The largest past the tenants' bound.", tenant, nil),
	}
}

// run reads every tenant's backlog at once, then every Interval, until
// ctx ends. While the fleet lists no tenant yet (Run has not read the
// file), it looks again every second rather than wait a whole Interval.
func (c *backlogCollector) run(ctx context.Context) {
	for {
		wait := c.cfg.Interval
		if c.readAll(ctx) == 0 {
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// readAll reads the tenants of each database URL in turn, storing each
// URL's reads as they come, and returns how many databases it read.
func (c *backlogCollector) readAll(ctx context.Context) int {
	byURL := c.f.tenantsByDatabase()
	c.forget(byURL)
	for _, url := range slices.Sorted(maps.Keys(byURL)) {
		if ctx.Err() != nil {
			break
		}
		tenants := byURL[url]
		reads, err := c.readDatabase(ctx, url, tenants)
		if ctx.Err() != nil {
			break // the fleet stops: its last reads are not the database's failure
		}
		c.store(tenants, reads, err)
	}
	return len(byURL)
}

// tenantsByDatabase is the fleet's tenants, by their database URL.
func (f *Fleet) tenantsByDatabase() map[string][]Tenant {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]Tenant{}
	for _, r := range f.runners {
		out[r.tenant.DatabaseURL] = append(out[r.tenant.DatabaseURL], r.tenant)
	}
	for _, ts := range out {
		slices.SortFunc(ts, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

// forget drops the reads of the tenants no longer in the fleet, and
// starts the clock of those new to it.
func (c *backlogCollector) forget(byURL map[string][]Tenant) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	current := map[string]bool{}
	for _, ts := range byURL {
		for _, t := range ts {
			current[t.Name] = true
			if c.tenants[t.Name] == nil {
				c.tenants[t.Name] = &tenantBacklog{worked: now}
			}
		}
	}
	for name := range c.tenants {
		if !current[name] {
			delete(c.tenants, name)
		}
	}
}

// store records the reads of tenants; err, when set, is every one's.
func (c *backlogCollector) store(tenants []Tenant, reads []tenantread.Backlog, err error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, t := range tenants {
		b := c.tenants[t.Name]
		if b == nil {
			b = &tenantBacklog{worked: now}
			c.tenants[t.Name] = b
		}
		readErr := err
		if readErr == nil {
			readErr = reads[i].Err
		}
		if readErr != nil {
			b.err = readErr
			continue
		}
		r := reads[i]
		*b = tenantBacklog{read: true, worked: now, pending: r.Pending, oldestAge: r.OldestAge.Seconds(), dead: r.DeadLetters, held: r.Held}
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pendingDesc
	ch <- c.ageDesc
	ch <- c.deadDesc
	ch <- c.heldDesc
	ch <- c.unreadDesc
	ch <- c.sampleAgeDesc
}

// labelBacklog is the backlog served under one tenant label.
type labelBacklog struct {
	read                bool // at least one of its tenants was read
	unread              float64
	sampleAge           float64
	pending, dead, held float64
	oldestAge           float64
}

// Collect serves the last reads, summed under each tenant label; a
// tenant whose last read failed adds to unread alone.
func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	byLabel := map[string]*labelBacklog{}
	c.mu.Lock()
	for name, b := range c.tenants {
		label := c.f.metrics.label(name)
		l := byLabel[label]
		if l == nil {
			l = &labelBacklog{}
			byLabel[label] = l
		}
		l.sampleAge = max(l.sampleAge, time.Since(b.worked).Seconds())
		if b.err != nil {
			l.unread++
			continue
		}
		if !b.read {
			continue // not read yet: no figures, and no failure
		}
		l.read = true
		l.pending += float64(b.pending)
		l.dead += float64(b.dead)
		l.held += float64(b.held)
		l.oldestAge = max(l.oldestAge, b.oldestAge)
	}
	c.mu.Unlock()
	for label, l := range byLabel {
		ch <- prometheus.MustNewConstMetric(c.unreadDesc, prometheus.GaugeValue, l.unread, label)
		ch <- prometheus.MustNewConstMetric(c.sampleAgeDesc, prometheus.GaugeValue, l.sampleAge, label)
		if !l.read {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.pendingDesc, prometheus.GaugeValue, l.pending, label)
		ch <- prometheus.MustNewConstMetric(c.ageDesc, prometheus.GaugeValue, l.oldestAge, label)
		ch <- prometheus.MustNewConstMetric(c.deadDesc, prometheus.GaugeValue, l.dead, label)
		ch <- prometheus.MustNewConstMetric(c.heldDesc, prometheus.GaugeValue, l.held, label)
	}
}

// readDatabase reads the backlog of tenants, all of database url, on one
// connection of a pool opened for the read and closed after it. err is
// the database's failure, every tenant's.
func (c *backlogCollector) readDatabase(ctx context.Context, url string, tenants []Tenant) ([]tenantread.Backlog, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	db, err := c.f.cfg.Open(url)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	schemas := make([]string, len(tenants))
	for i, t := range tenants {
		schemas[i] = t.Schema
	}
	return tenantread.ReadDatabase(ctx, db, c.f.tables(), schemas, c.cfg.MaxCount)
}
