package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// With --databases-file the command runs a fleet (package relay/fleet):
// one relay per tenant database of the file, each with the settings of
// the other flags.

// fleetRefusedFlags are the flags of one database, or not yet per tenant:
// refused with --databases-file rather than applied to every tenant.
var fleetRefusedFlags = map[string]string{
	"database-url":        "the databases are the file's",
	"listen-database-url": "each tenant's relay polls, or listens on its own database",
	"replication-url":     "the wal path is not run by the fleet yet",
	"relay-id":            "each tenant's relay is named by the fleet",
	"poll-only":           "the fleet's relays poll unless --fleet-listen",
	"delivered-log":       "the fleet's prober of parked tenants reads delivered_at, not the delivered log, yet",
}

// addFleetFlags adds the flags of a fleet: where its tenants are listed,
// how their relays share the budget and the processes share the tenants.
func (o *relayOptions) addFleetFlags(f *pflag.FlagSet) {
	f.StringVar(&o.databasesFile, "databases-file", "", "JSON file of the tenants' databases, one relay each in this process, "+
		`re-read every second: {"tenants": [{"name": "acme", "database_url": "postgres://…", "schema": "acme"}]} (docs/tenants.md); `+
		"instead of --database-url; --max-connections is then the budget of all their pools (default 100)")
	f.BoolVar(&o.fleetListen, "fleet-listen", false, "with --databases-file: each tenant's relay LISTENs for new rows "+
		"(6 connections at least per tenant) instead of polling every --poll-interval (3)")
	f.DurationVar(&o.fleetIdleAfter, "fleet-idle-after", fleet.DefaultIdleAfter, "with --databases-file: park a tenant whose relay "+
		"had nothing to publish for this long (its relay stopped, no connection held) until its outbox has work; 0 never parks")
	f.DurationVar(&o.fleetTurn, "fleet-turn", fleet.DefaultTurn, "with --databases-file: when more tenants have work than "+
		"relays fit in --max-connections at once, each runs this long while others wait, then makes way")
	f.StringVar(&o.registryURL, "registry-database-url", "", "a PostgreSQL database whose registry table lists tenants' databases, "+
		"a row each, re-read every second (docs/tenants.md): one relay each in this process, beside or instead of --databases-file's")
	f.StringVar(&o.registryTable, "registry-table", fleet.DefaultRegistryTable, "with --registry-database-url: the registry table "+
		"(name, database_url, schema), optionally schema.table")
	f.StringVar(&o.fleetDatabaseURL, "fleet-database-url", "", "with --databases-file: a PostgreSQL database every process of the fleet "+
		"reaches, where each records its heartbeat (table "+fleet.MembersTable+"); the processes given the same file and this URL divide "+
		"the tenants, each relayed by one of them, and take a stopped or silent one's tenants (docs/tenants.md)")
	f.StringVar(&o.fleetMemberID, "fleet-member-id", "", "with --fleet-database-url: this process's name among the fleet's "+
		"(default host name, pid and a random suffix); each process needs its own")
	f.DurationVar(&o.fleetMemberTimeout, "fleet-member-timeout", fleet.DefaultMemberTimeout, "with --fleet-database-url: how long "+
		"a process may go without a heartbeat before the others take its tenants")
	f.DurationVar(&o.fleetBacklogInterval, "fleet-backlog-interval", fleet.DefaultBacklogInterval, "with --databases-file and "+
		"--metrics-addr: read every tenant's backlog (pending events, oldest age, dead letters) for /metrics this often, "+
		"one connection per database URL at a time")
	f.IntVar(&o.fleetProbeConcurrency, "fleet-probe-concurrency", fleet.DefaultProbeConcurrency, "with --databases-file: how many "+
		"databases of parked tenants are read at once for work, each on a connection opened for the read")
	f.IntVar(&o.metricsTenants, "metrics-tenants", fleet.DefaultMetricsTenants, "with --databases-file and --metrics-addr: "+
		"the first N tenants by name keep their tenant label on the metrics, the others' are summed under tenant=\""+fleet.OtherTenants+"\"")
}

// fleet tells whether the command runs a fleet: tenants from a file, a
// registry table or both.
func (o *relayOptions) fleet() bool { return o.databasesFile != "" || o.registryURL != "" }

// checkFleet refuses, with --databases-file, a flag of one database and a
// path the fleet does not run; without it, a fleet's own flag.
func (o *relayOptions) checkFleet(flags *pflag.FlagSet) error {
	if !o.fleet() {
		switch {
		case flags.Changed("registry-table"):
			return errors.New("--registry-table names the table of --registry-database-url")
		case o.fleetListen:
			return errors.New("--fleet-listen applies to the relays of --databases-file")
		case flags.Changed("fleet-idle-after"):
			return errors.New("--fleet-idle-after applies to the relays of --databases-file")
		case flags.Changed("metrics-tenants"):
			return errors.New("--metrics-tenants applies to the metrics of --databases-file's tenants")
		case flags.Changed("fleet-probe-concurrency"):
			return errors.New("--fleet-probe-concurrency applies to the relays of --databases-file")
		case flags.Changed("fleet-turn"):
			return errors.New("--fleet-turn applies to the relays of --databases-file")
		case o.fleetDatabaseURL != "":
			return errors.New("--fleet-database-url applies to the processes of a fleet of --databases-file")
		case flags.Changed("fleet-backlog-interval"):
			return errors.New("--fleet-backlog-interval applies to the metrics of --databases-file's tenants")
		}
		return nil
	}
	if o.fleetDatabaseURL == "" && (flags.Changed("fleet-member-id") || flags.Changed("fleet-member-timeout")) {
		return errors.New("--fleet-member-id and --fleet-member-timeout name this process among those of --fleet-database-url")
	}
	if u := o.fleetDatabaseURL; strings.HasPrefix(u, "mysql:") || strings.HasPrefix(u, "sqlite:") {
		return errors.New("--fleet-database-url: the fleet's members are kept in a PostgreSQL database; give a postgres:// URL")
	}
	if u := o.registryURL; strings.HasPrefix(u, "mysql:") || strings.HasPrefix(u, "sqlite:") {
		return errors.New("--registry-database-url: the registry table is read from a PostgreSQL database; give a postgres:// URL")
	}
	if o.fleetProbeConcurrency < 1 {
		return fmt.Errorf("--fleet-probe-concurrency %d: at least 1", o.fleetProbeConcurrency)
	}
	if o.fleetTurn <= 0 {
		return fmt.Errorf("--fleet-turn %s: a positive duration", o.fleetTurn)
	}
	if o.fleetMemberTimeout <= 0 {
		return fmt.Errorf("--fleet-member-timeout %s: a positive duration", o.fleetMemberTimeout)
	}
	if o.fleetIdleAfter < 0 {
		return fmt.Errorf("--fleet-idle-after %s: a duration, or 0 to never park a tenant", o.fleetIdleAfter)
	}
	if o.fleetBacklogInterval <= 0 {
		return fmt.Errorf("--fleet-backlog-interval %s: a positive duration", o.fleetBacklogInterval)
	}
	if o.metricsTenants < 1 {
		return fmt.Errorf("--metrics-tenants %d: at least 1 tenant keeps its label", o.metricsTenants)
	}
	var err error
	flags.Visit(func(f *pflag.Flag) {
		if fromGenericDatabaseURL(f) {
			return // a platform's variable for every program: ignored (runFleet says so)
		}
		if why, refused := fleetRefusedFlags[f.Name]; refused && err == nil {
			err = fmt.Errorf("%s cannot go with --databases-file: %s; drop it", givenAs(f), why)
		}
	})
	if err != nil {
		return err
	}
	if p := relay.Path(o.path); p != relay.PathFast && p != relay.PathCompatible {
		return fmt.Errorf("--path %s cannot go with --databases-file: the fleet runs the fast or the compatible path", p)
	}
	if o.maxConns < 1 {
		return fmt.Errorf("--max-connections %d: the budget of the fleet's connections must be positive", o.maxConns)
	}
	return nil
}

// fromGenericDatabaseURL tells whether f is --database-url taken from
// DATABASE_URL, which platforms set for every program of an app.
func fromGenericDatabaseURL(f *pflag.Flag) bool {
	env := f.Annotations[envAnnotation]
	return f.Name == "database-url" && len(env) > 0 && env[0] == "DATABASE_URL"
}

// runFleet runs the relays of the databases file until ctx ends, logging
// to w.
func (o *relayOptions) runFleet(ctx context.Context, flags *pflag.FlagSet, w io.Writer, redact redactor) error {
	logger, wmLogger, stopTraces, err := o.start(ctx, w, redact)
	if err != nil {
		return err
	}
	defer stopTraces()
	b, err := broker.Open(ctx, o.brokerURL, broker.Options{Logger: wmLogger})
	if err != nil {
		return err
	}
	defer b.Close()
	cfg := o.config()
	cfg.Publisher, cfg.Logger = b.Publisher(), wmLogger
	cfg.MessagingSystem = broker.MessagingSystem(b.Scheme())
	budget := o.maxConns
	if !flags.Changed("max-connections") {
		budget = fleet.DefaultMaxConnections
	}
	fc := fleet.Config{File: o.databasesFile, Relay: cfg, Listen: o.fleetListen, MaxConnections: budget, Logger: wmLogger,
		MetricsTenants: o.metricsTenants, IdleAfter: fleetIdleAfter(o.fleetIdleAfter), Turn: o.fleetTurn, ProbeConcurrency: o.fleetProbeConcurrency, Open: func(databaseURL string) (*sql.DB, error) {
			return openServiceDB(databaseURL, relayApplicationName, logger, redact)
		}}
	if o.registryURL != "" {
		registry, err := openServiceDB(o.registryURL, relayApplicationName, logger, redact)
		if err != nil {
			return fmt.Errorf("--registry-database-url: %w", err)
		}
		defer registry.Close()
		registry.SetMaxOpenConns(1) // one read every second
		fc.Registry, fc.RegistryTable = registry, o.registryTable
	}
	if o.fleetDatabaseURL != "" {
		members, err := openServiceDB(o.fleetDatabaseURL, relayApplicationName, logger, redact)
		if err != nil {
			return fmt.Errorf("--fleet-database-url: %w", err)
		}
		defer members.Close()
		members.SetMaxOpenConns(1) // a heartbeat every --fleet-member-timeout/5, one statement at a time
		fc.Members, fc.MemberID, fc.MemberTimeout = members, o.fleetMemberID, o.fleetMemberTimeout
	}
	var reg *prometheus.Registry
	if o.metricsAddr != "" {
		reg = prometheus.NewRegistry()
		if err := registerRuntime(reg); err != nil {
			return err
		}
		fc.Metrics = reg
	}
	f, err := fleet.New(fc)
	if err != nil {
		return err
	}
	if reg != nil {
		if err := f.WatchBacklogs(ctx, fleet.BacklogConfig{Interval: o.fleetBacklogInterval}); err != nil {
			return err
		}
		// Ready once serving: each tenant's state is in the metrics
		// (entoutbox_fleet_tenant_up), a tenant down is no reason to
		// restart the process.
		stopOps, err := o.serveOps(reg, func(context.Context) error { return nil }, logger, redact)
		if err != nil {
			return err
		}
		defer stopOps()
	}
	if f := flags.Lookup("database-url"); f.Changed && fromGenericDatabaseURL(f) {
		logger.Info("DATABASE_URL is ignored: the databases are those of --databases-file")
	}
	logger.Info("Relay fleet starting", "databases_file", o.databasesFile, "registry", o.registryURL != "", "broker", redact.String(o.brokerURL), "path", o.path,
		"max_connections", budget, "shared", o.fleetDatabaseURL != "")
	if err := f.Run(ctx); err != nil {
		return err
	}
	logger.Info("Relay fleet stopped")
	return nil
}

// fleetIdleAfter is --fleet-idle-after as fleet.Config.IdleAfter: 0, never
// park, is a negative bound there (zero takes the default).
func fleetIdleAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
