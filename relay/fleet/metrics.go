package fleet

import (
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/entoutbox/entoutbox/metrics"
)

// OtherTenants is the tenant label of the metrics of the tenants past
// Config.MetricsTenants: theirs are summed under it.
const OtherTenants = "_other"

// DefaultMetricsTenants is how many tenants keep a label of their own when
// Config.MetricsTenants is zero.
const DefaultMetricsTenants = 50

// tenantMetrics gives each tenant's relay the relay's metrics (package
// metrics) with a constant label tenant: its own name for the first
// tenants met, up to a bound, OtherTenants for the rest, whose series are
// one. A label once given stays: its counters go on counting if the
// tenant leaves and comes back, and its series stay until the process
// ends.
type tenantMetrics struct {
	reg   prometheus.Registerer
	bound int

	mu     sync.Mutex
	own    int                         // tenants with a label of their own
	labels map[string]string           // tenant: its label
	byName map[string]*metrics.Metrics // label: its metrics
}

func newTenantMetrics(reg prometheus.Registerer, bound int) *tenantMetrics {
	return &tenantMetrics{reg: reg, bound: bound, labels: map[string]string{}, byName: map[string]*metrics.Metrics{}}
}

// assign gives a label to each of names without one, in the order of
// their names: their own while fewer than the bound have one, then
// OtherTenants.
func (tm *tenantMetrics) assign(names []string) error {
	names = slices.Sorted(slices.Values(names))
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, name := range names {
		if _, ok := tm.labels[name]; ok {
			continue
		}
		label := OtherTenants
		if tm.own < tm.bound {
			label = name
			tm.own++
		}
		if tm.byName[label] == nil {
			m, err := metrics.New(prometheus.WrapRegistererWith(prometheus.Labels{"tenant": label}, tm.reg))
			if err != nil {
				return fmt.Errorf("fleet: the metrics of tenant %s: %w", name, err)
			}
			tm.byName[label] = m
		}
		tm.labels[name] = label
	}
	return nil
}

// of is the metrics of tenant name (nil before assign).
func (tm *tenantMetrics) of(name string) *metrics.Metrics {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.byName[tm.labels[name]]
}

// label is the tenant label of name's series.
func (tm *tenantMetrics) label(name string) string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if l, ok := tm.labels[name]; ok {
		return l
	}
	return OtherTenants
}

// stateCollector reports each tenant's state from Fleet.Status, under the
// tenant labels of tenantMetrics (OtherTenants summing the rest), and the
// number of tenants in each state.
type stateCollector struct {
	f                             *Fleet
	up, down, failures, connected *prometheus.Desc
	tenants                       *prometheus.Desc
}

func newStateCollector(f *Fleet) *stateCollector {
	return &stateCollector{f: f,
		up: prometheus.NewDesc("entoutbox_fleet_tenant_up",
			"1 when the tenant's relay runs and is ready, is parked (idle, woken when work comes) or waits its turn in the connection budget, else 0 (starting, unready, failed, stopping); "+
				"under tenant=\""+OtherTenants+"\", how many of the tenants past the bound are.", []string{"tenant"}, nil),
		down: prometheus.NewDesc("entoutbox_fleet_tenant_down",
			"1 when the tenant's relay is not up (starting, unready, failed, stopping), else 0; "+
				"under tenant=\""+OtherTenants+"\", how many of the tenants past the bound are not up.", []string{"tenant"}, nil),
		failures: prometheus.NewDesc("entoutbox_fleet_tenant_failures",
			"Failed starts of the tenant's relay since it was last ready (summed past the bound).", []string{"tenant"}, nil),
		connected: prometheus.NewDesc("entoutbox_fleet_tenant_max_connections",
			"The bound of the tenant's pool (summed past the bound).", []string{"tenant"}, nil),
		tenants: prometheus.NewDesc("entoutbox_fleet_tenants",
			"Tenants of the databases file, by the state of their relay.", []string{"state"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.down
	ch <- c.failures
	ch <- c.connected
	ch <- c.tenants
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	tenants, _ := c.f.Status()
	type sums struct{ up, down, failures, conns float64 }
	byLabel := map[string]*sums{}
	byState := map[State]float64{StateStarting: 0, StateRunning: 0, StateUnready: 0, StateFailed: 0, StateStopping: 0, StateParked: 0, StateWaiting: 0}
	if c.f.members != nil {
		byState[StateElsewhere] = 0
	}
	for _, t := range tenants {
		if t.State == StateElsewhere {
			byState[t.State]++
			continue // another process reports it: one series per tenant across the fleet
		}
		label := c.f.metrics.label(t.Tenant)
		s := byLabel[label]
		if s == nil {
			s = &sums{}
			byLabel[label] = s
		}
		if t.State == StateRunning || t.State == StateParked || t.State == StateWaiting {
			s.up++
		} else {
			s.down++
		}
		s.failures += float64(t.Failures)
		s.conns += float64(t.Connections)
		byState[t.State]++
	}
	for label, s := range byLabel {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, s.up, label)
		ch <- prometheus.MustNewConstMetric(c.down, prometheus.GaugeValue, s.down, label)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, s.failures, label)
		ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, s.conns, label)
	}
	for state, n := range byState {
		ch <- prometheus.MustNewConstMetric(c.tenants, prometheus.GaugeValue, n, string(state))
	}
}
