package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/relay"
)

// Config configures a Fleet.
type Config struct {
	// File is the path of the databases file (see File), read every
	// Reload. File, Registry or both are required.
	File string
	// Registry is a PostgreSQL database whose registry table
	// (RegistryTable, DefaultRegistryTable when empty; see
	// RegistryTableDDL) lists tenants, a row each, read every Reload:
	// the operator's tooling adds and removes tenants with INSERT and
	// DELETE. With File as well, the tenants of both are relayed.
	Registry      *sql.DB
	RegistryTable string
	// Relay is the settings every tenant's relay runs with: its Publisher
	// (shared by all), its path and tunings. DB and Tenant must be unset:
	// each tenant's are its own. Fast.PollOnly is set unless Listen.
	Relay relay.Config
	// Listen lets each tenant's relay LISTEN for new rows (and hold its
	// liveness session), at the cost of connections held per tenant
	// (ConnectionsPerTenant); off, a tenant's relay polls every
	// Relay.PollInterval.
	Listen bool
	// MaxConnections is the budget of all the tenants' pools together,
	// divided among them (ConnectionsPerTenant); DefaultMaxConnections
	// when zero.
	MaxConnections int
	// Reload is how often the file is read; DefaultReload when zero.
	Reload time.Duration
	// IdleAfter parks a tenant whose relay had nothing to publish for
	// that long: its relay stops gracefully and its pool closes, until
	// the prober finds work in its outbox (StateParked). A tenant starts
	// parked: its relay starts once the prober found work.
	// DefaultIdleAfter when zero; negative, no tenant is parked.
	IdleAfter time.Duration
	// ProbeInterval is how often the parked tenants' outboxes are read
	// for work; Relay.PollInterval (or its default) when zero.
	ProbeInterval time.Duration
	// ProbeConcurrency is how many databases the prober reads at once,
	// each on a connection of its own for the length of its read;
	// DefaultProbeConcurrency when zero.
	ProbeConcurrency int
	// RetryInterval is the first wait before a failed tenant's relay is
	// started again, doubling up to MaxRetryInterval; DefaultRetryInterval
	// and DefaultMaxRetryInterval when zero.
	RetryInterval, MaxRetryInterval time.Duration
	// Open opens a tenant's pool on its URL; pgdial (the pgx driver)
	// when nil.
	Open func(databaseURL string) (*sql.DB, error)
	// Metrics, when set, receives each tenant's relay's metrics (package
	// metrics) with a constant label tenant, and the tenants' states
	// (entoutbox_fleet_tenant_up, _failures, _max_connections and
	// entoutbox_fleet_tenants by state). The first MetricsTenants tenants
	// by name (DefaultMetricsTenants when zero) keep their name as the
	// label; the others' series are summed under OtherTenants. Relay.Metrics
	// must be unset.
	Metrics        prometheus.Registerer
	MetricsTenants int
	// Logger receives what the fleet logs, and each relay's log with the
	// field tenant; Relay.Logger, or slog.Default(), when nil.
	Logger watermill.LoggerAdapter
	// Members, when set, is a PostgreSQL database every process of the
	// fleet reaches, where each records its heartbeat (MembersTable, made
	// when missing). The processes given the same file and the same
	// Members divide the tenants: each tenant is relayed by one live
	// process, and the tenants move when a process joins, leaves or goes
	// without a heartbeat for MemberTimeout. Nil: this process relays
	// every tenant of the file.
	Members *sql.DB
	// MemberID names this process among Members: its host name, process
	// id and a random suffix when empty. Each process needs its own.
	MemberID string
	// Turn is how long a tenant's relay runs, while other tenants wait for
	// room in the budget (StateWaiting), before it stops and makes way
	// for them; DefaultTurn when zero.
	Turn time.Duration
	// MemberTimeout is how long a process may go without a heartbeat
	// before the others take its tenants; DefaultMemberTimeout when zero.
	// A killed process's tenants are relayed again after MemberTimeout
	// plus the lapse of its relays' partition leases (Relay.Lease).
	MemberTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultMaxConnections   = 100
	DefaultReload           = time.Second
	DefaultRetryInterval    = time.Second
	DefaultMaxRetryInterval = time.Minute
	DefaultIdleAfter        = 30 * time.Second
)

// The floor of a tenant's pool: what its relay holds at once for as long
// as it runs, and room for its other statements. Polling, it holds one
// connection to claim on; listening, also its LISTEN, its liveness
// session and the scheduled events' LISTEN. Two more for the statements
// that borrow one for a moment (acks, lease renewals, dead letters).
const (
	MinConnectionsPolling   = 3
	MinConnectionsListening = 6
)

// ConnectionsPerTenant is the bound of each tenant's pool with tenants
// databases: the budget divided among the relays that run at once (the
// tenants, or RelaysAtOnce when there are more), never below the floor
// (MinConnectionsPolling, or MinConnectionsListening when listening: with
// Config.Listen, or on the compatible path). Relays at once times this
// stays within the budget, unless the budget is below one floor.
func ConnectionsPerTenant(budget, tenants int, listening bool) int {
	if tenants == 0 {
		return floor(listening)
	}
	return max(floor(listening), budget/min(tenants, RelaysAtOnce(budget, listening)))
}

// Fleet relays the outboxes of the tenants' databases.
type Fleet struct {
	cfg    Config
	logger watermill.LoggerAdapter
	// prefix starts each relay's RelayID: a relay the fleet restarts is
	// the same member of its partition table, back at work at once.
	prefix string

	members *membership // nil without Config.Members
	turns   *turns      // room for relays at once within the budget

	mu      sync.Mutex
	runners map[string]*runner // by tenant name; changed by Run alone
	// elsewhere is the tenants another member of the fleet relays, with
	// that member's id; changed by Run alone.
	elsewhere map[string]string
	metrics   *tenantMetrics // nil without Config.Metrics
	fileErr   string         // the last refused read of the file, "" after a good one
}

// New checks cfg and returns a fleet; Run starts it.
func New(cfg Config) (*Fleet, error) {
	switch {
	case cfg.File == "" && cfg.Registry == nil:
		return nil, errors.New("fleet: Config.File is empty and Config.Registry nil; name the databases file, or the registry's database")
	case cfg.Relay.DB != nil:
		return nil, errors.New("fleet: Config.Relay.DB is set; each tenant's relay gets a pool on its own database")
	case cfg.Relay.Tenant != "":
		return nil, errors.New("fleet: Config.Relay.Tenant is set; each tenant's relay is given its name from the file")
	case cfg.Relay.Publisher == nil:
		return nil, errors.New("fleet: Config.Relay.Publisher is nil")
	case cfg.Relay.Path != "" && cfg.Relay.Path != relay.PathFast && cfg.Relay.Path != relay.PathCompatible:
		return nil, fmt.Errorf("fleet: Config.Relay.Path %q: the fleet runs the fast or the compatible path for now "+
			"(a WAL slot is per database, and tenants may share one)", cfg.Relay.Path)
	case cfg.Relay.Metrics != nil:
		return nil, errors.New("fleet: Config.Relay.Metrics is set; give the registerer as Config.Metrics, labelled per tenant")
	case cfg.MetricsTenants < 0:
		return nil, errors.New("fleet: Config.MetricsTenants must not be negative")
	case cfg.MaxConnections < 0 || cfg.Reload < 0 || cfg.RetryInterval < 0 || cfg.MaxRetryInterval < 0 || cfg.ProbeInterval < 0 ||
		cfg.MemberTimeout < 0 || cfg.Turn < 0 || cfg.ProbeConcurrency < 0:
		return nil, errors.New("fleet: Config.MaxConnections, Reload, RetryInterval, MaxRetryInterval, ProbeInterval, ProbeConcurrency, MemberTimeout and Turn " +
			"must not be negative")
	case cfg.Members == nil && (cfg.MemberID != "" || cfg.MemberTimeout != 0):
		return nil, errors.New("fleet: Config.MemberID and MemberTimeout name this process among Config.Members, which is nil")
	}
	if err := cfg.source().check(); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	setDefaults(&cfg)
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	f := &Fleet{cfg: cfg, logger: cfg.Logger, prefix: "fleet-" + hex.EncodeToString(id) + "-", runners: map[string]*runner{},
		elsewhere: map[string]string{}}
	f.turns = newTurns(RelaysAtOnce(cfg.MaxConnections, f.listening()))
	if cfg.Members != nil {
		f.members = newMembership(cfg.Members, cfg.MemberID, cfg.MemberTimeout, cfg.Logger)
	}
	if cfg.Metrics != nil {
		f.metrics = newTenantMetrics(cfg.Metrics, cmpOr(cfg.MetricsTenants, DefaultMetricsTenants))
		if err := cfg.Metrics.Register(newStateCollector(f)); err != nil {
			return nil, fmt.Errorf("fleet: registering the tenants' states: %w", err)
		}
	}
	return f, nil
}

func setDefaults(cfg *Config) {
	if cfg.Relay.Path == "" {
		cfg.Relay.Path = relay.PathFast
	}
	if cfg.Relay.Path == relay.PathFast && !cfg.Listen {
		cfg.Relay.Fast.PollOnly = true
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Relay.Logger
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NewSlogLogger(slog.Default())
	}
	cfg.MaxConnections = cmpOr(cfg.MaxConnections, DefaultMaxConnections)
	cfg.Reload = cmpOr(cfg.Reload, DefaultReload)
	cfg.IdleAfter = cmpOr(cfg.IdleAfter, DefaultIdleAfter)
	cfg.ProbeInterval = cmpOr(cfg.ProbeInterval, cmpOr(cfg.Relay.PollInterval, relay.DefaultPollInterval))
	cfg.RetryInterval = cmpOr(cfg.RetryInterval, DefaultRetryInterval)
	cfg.MemberTimeout = cmpOr(cfg.MemberTimeout, DefaultMemberTimeout)
	cfg.Turn = cmpOr(cfg.Turn, DefaultTurn)
	cfg.ProbeConcurrency = cmpOr(cfg.ProbeConcurrency, DefaultProbeConcurrency)
	if cfg.MemberID == "" {
		cfg.MemberID = defaultMemberID()
	}
	cfg.MaxRetryInterval = max(cmpOr(cfg.MaxRetryInterval, DefaultMaxRetryInterval), cfg.RetryInterval)
	if cfg.Open == nil {
		cfg.Open = func(u string) (*sql.DB, error) {
			return pgdial.Open(u, pgdial.Options{ApplicationName: "entoutbox relay fleet"})
		}
	}
}

func (cfg Config) source() Source {
	return Source{File: cfg.File, Registry: cfg.Registry, RegistryTable: cfg.RegistryTable}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Run relays the tenants of the file until ctx ends, then stops every
// relay gracefully and returns nil. It returns an error at once when the
// file cannot be read or is refused at the start; later, a refused file
// is logged and the tenants of the last good one go on.
func (f *Fleet) Run(ctx context.Context) error {
	data, tenants, err := f.cfg.source().read(ctx)
	if err != nil {
		return err
	}
	if f.members != nil {
		if err := f.members.join(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			return err
		}
		defer f.stopAll()
		defer f.leave(f.beat(ctx)) // first: the others take the tenants while ours stop
	} else {
		defer f.stopAll()
	}
	f.apply(ctx, tenants)
	if f.cfg.IdleAfter > 0 {
		probing, stopProbing := context.WithCancel(ctx)
		defer stopProbing()
		go f.probeParked(probing)
	}
	tick := time.NewTicker(f.cfg.Reload)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.membersChanged():
			f.apply(ctx, tenants)
			continue
		case <-tick.C:
		}
		next, read, err := f.cfg.source().read(ctx)
		f.setFileError(err, next == nil)
		if err != nil || bytes.Equal(next, data) {
			continue
		}
		data, tenants = next, read
		f.apply(ctx, tenants)
	}
}

// setFileError records a refused read of the file, logging it when it is
// new, or clears it after a good one.
func (f *Fleet) setFileError(err error, unread bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.fileErr = ""
		return
	}
	if err.Error() != f.fileErr {
		f.logger.Error("Tenants' source refused; the tenants of its last good version go on", err,
			watermill.LogFields{"file": f.cfg.File, "registry": f.cfg.Registry != nil, "unreadable": unread})
	}
	f.fileErr = err.Error()
}

// apply makes the running relays those of tenants: it stops the relays
// of tenants gone or changed (all at once, each waiting for its in-flight
// publishes), starts the new ones, and divides the budget anew.
func (f *Fleet) apply(ctx context.Context, all []Tenant) {
	f.labelMetrics(all)
	tenants, elsewhere := f.assign(all)
	want := make(map[string]Tenant, len(tenants))
	for _, t := range tenants {
		want[t.Name] = t
	}
	var stopping []*runner
	f.mu.Lock()
	for name, r := range f.runners {
		if t, ok := want[name]; !ok || t != r.tenant {
			stopping = append(stopping, r)
		}
	}
	f.mu.Unlock()
	stopRunners(stopping) // listed as stopping until they stopped
	f.mu.Lock()
	for _, r := range stopping {
		delete(f.runners, r.tenant.Name)
	}
	f.mu.Unlock()
	conns := ConnectionsPerTenant(f.cfg.MaxConnections, len(tenants), f.listening())
	f.mu.Lock()
	f.elsewhere = elsewhere
	var started []string
	for _, t := range tenants {
		if _, ok := f.runners[t.Name]; !ok {
			f.runners[t.Name] = f.start(ctx, t, conns)
			started = append(started, t.Name)
		}
	}
	for _, r := range f.runners {
		r.setConnections(conns)
	}
	f.mu.Unlock()
	f.logApplied(tenants, len(elsewhere), started, stopping, conns)
}

// labelMetrics gives the tenants their metrics' label, in the order of
// their names; a failure to register is logged, and the tenant's relay
// runs without metrics.
func (f *Fleet) labelMetrics(tenants []Tenant) {
	if f.metrics == nil {
		return
	}
	names := make([]string, len(tenants))
	for i, t := range tenants {
		names[i] = t.Name
	}
	if err := f.metrics.assign(names); err != nil {
		f.logger.Error("Fleet metrics not registered", err, nil)
	}
}

func (f *Fleet) logApplied(tenants []Tenant, elsewhere int, started []string, stopped []*runner, conns int) {
	names := make([]string, len(stopped))
	for i, r := range stopped {
		names[i] = r.tenant.Name
	}
	slices.Sort(names)
	f.logger.Info("Fleet databases applied", watermill.LogFields{"tenants": len(tenants), "elsewhere": elsewhere,
		"started": strings.Join(started, ","),
		"stopped": strings.Join(names, ","), "connections_per_tenant": conns, "max_connections": f.cfg.MaxConnections})
	if atOnce := RelaysAtOnce(f.cfg.MaxConnections, f.listening()); len(tenants) > atOnce {
		f.logger.Info("More tenants than relays at once within the connection budget: those with work take turns", watermill.LogFields{
			"tenants": len(tenants), "relays_at_once": atOnce, "turn": f.cfg.Turn.String(), "max_connections": f.cfg.MaxConnections})
	}
	if conns > f.cfg.MaxConnections {
		f.logger.Error("Fleet connection budget below the floor of one relay's pool", nil,
			watermill.LogFields{"connections_per_tenant": conns, "max_connections": f.cfg.MaxConnections})
	}
}

// listening tells whether the tenants' relays hold LISTEN connections:
// with Listen, and on the compatible path, whose scheduled events'
// promoter listens (it has no poll-only mode).
func (f *Fleet) listening() bool {
	return f.cfg.Listen || f.cfg.Relay.Path == relay.PathCompatible
}

// stopAll stops every relay, at once, each gracefully.
func (f *Fleet) stopAll() {
	f.mu.Lock()
	all := make([]*runner, 0, len(f.runners))
	for _, r := range f.runners {
		all = append(all, r)
	}
	f.mu.Unlock()
	stopRunners(all)
	f.mu.Lock()
	clear(f.runners)
	f.mu.Unlock()
}

// stopRunners stops the relays of rs at once, and waits until each has
// stopped: its in-flight publishes finished and recorded.
func stopRunners(rs []*runner) {
	for _, r := range rs {
		r.stop()
	}
	for _, r := range rs {
		<-r.done
	}
}

// memberID is this process's id among Config.Members, "" without.
func (f *Fleet) memberID() string {
	if f.members == nil {
		return ""
	}
	return f.cfg.MemberID
}

// Status is the state of every tenant's relay, by name (StateElsewhere
// for a tenant another process of the fleet relays); FileError is the
// last refused read of the databases file, "" when the last was good.
func (f *Fleet) Status() (tenants []TenantStatus, fileError string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.turns.consistent(func() { // never more running than the room, even for an instant
		for _, r := range f.runners {
			s := r.status()
			s.Member = f.memberID()
			tenants = append(tenants, s)
		}
	})
	for name, member := range f.elsewhere {
		tenants = append(tenants, TenantStatus{Tenant: name, State: StateElsewhere, Member: member})
	}
	slices.SortFunc(tenants, func(a, b TenantStatus) int { return strings.Compare(a.Tenant, b.Tenant) })
	return tenants, f.fileErr
}
