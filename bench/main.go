// Command bench compares relays side by side on the local PostgreSQL and
// NATS JetStream and prints one table:
//
//	go run ./bench                       # every row, default sizes
//	go run ./bench --paths compatible --events 5000 --latency-duration 5s --hold 5s
//	go run ./bench --baseline-bin /path/to/old-entoutbox   # each row before and after a change
//	go run ./bench --paths scheduled --emit-tx 0 --consumer-events 0   # the scheduled events' section alone
//	go run ./bench --consumer-skew       # the consumers' key-skew table alone, 10,000 events a row
//	go run ./bench --paths= --consumer-events 0 --skew-events 0   # the emit cost, the SQLite and the MariaDB sections
//	go run ./bench --fleet               # the fleet section alone: 200 tenant databases, one relay process, then 3 sharing them
//	go run ./bench --retention           # the retention section alone: fast and fastlog beside 10,000,000 retained rows, then a simulated week
//	go run ./bench --retention --retention-rows 2000000 --retention-day-events 200000   # the same, smaller
//
// Each relay runs as a child process (the entoutbox command, built once) so
// that its peak memory is its own. Each row works in a fresh PostgreSQL
// schema and under a unique topic prefix, both removed at the end. Numbers
// are printed, never judged. Progress goes to stderr, the table to stdout.
//
// The retention section (--retention, retention.go) prints two tables: the
// fast path stamping delivered_at (fast) and with the delivered log
// (fastlog), each drained and at --rate on an empty outbox and then beside
// --retention-rows delivered rows kept in the same table, marked as that
// path marks them; then the outbox's size on disk after --retention-days
// simulated days of --retention-day-events events, delivered each path's
// way, cleaned up by relay.CleanupDelivered keeping --retention-keep days
// and vacuumed, each day.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/entoutbox/entoutbox/broker"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// config is everything a run depends on; main fills it from flags, the test
// by hand.
type config struct {
	DatabaseURL     string
	Broker          string
	Paths           []string // row keys, see rowSpecs
	Events          int      // drained at once
	Rate            int      // events/s of the paced load
	LatencyDuration time.Duration
	Hold            time.Duration // paced load while transactions are held open
	EmitTx          int           // transactions per variant of the emit cost
	Retained        int           // delivered rows present before the drain
	// ScheduledWaiting is how many scheduled events, due days ahead, wait
	// in every relay row; the scheduled section (Paths "scheduled") runs
	// its rows without and with ScheduledSectionWaiting of them.
	ScheduledWaiting        int
	ScheduledSectionWaiting int
	Aggregates              int           // distinct aggregate ids
	PollInterval            time.Duration // passed to the relay when non-zero
	BatchSize               int           // passed to the relay when non-zero
	NearLimit               float64       // the near-limit load's rate, as a fraction of the drain rate; 0 skips it
	Timeout                 time.Duration // longest wait for events to arrive, per phase
	RelayProfile            string        // where to write a CPU profile of the first relay's drain; "" for none
	ConsumerProfile         string        // where to write a CPU profile of each consumer row's drain; "" for none
	ProfileFor              time.Duration // how long that profile runs
	// The consumer section (see consumers.go); ConsumerEvents 0 skips it.
	ConsumerEvents     int // the backlog every consumer row drains, the poll sections' too (pollconsumers.go)
	ConsumerAggregates int // distinct aggregate ids of that backlog
	ConsumerConns      int // connections of the many-connection floor
	ConsumerPerTx      int // events per transaction of the batched floors
	// The key-skew table (see skew.go); SkewEvents 0 skips it.
	SkewEvents             int   // already in JetStream, per row
	SkewAggregates         []int // aggregate counts of the one-instance rows
	SkewInstances          []int // instance counts of the rows at SkewInstanceAggregates
	SkewInstanceAggregates []int
	SQLite                 bool      // the SQLite section (see sqlite.go)
	MySQL                  bool      // the MariaDB section (see mysql.go)
	MySQLURL               string    // the MariaDB/MySQL server it makes its databases on
	SkewRounds             int       // times each row runs, interleaved with the rows of its aggregate count; the table prints the median
	Progress               io.Writer // progress lines; nil discards them
	// The fleet section (see fleet.go); FleetDatabases 0 skips it.
	FleetDatabases     int           // tenant databases, one busy
	FleetIdleAfter     time.Duration // the fleet's --fleet-idle-after
	FleetIdleWindow    time.Duration // how long the idle cost is measured
	FleetProcesses     int           // processes of the kill row; below 2 skips it
	FleetBacklog       int           // events waiting in the busy tenant for the backlog row; 0 skips it
	FleetBusy          int           // busy tenants of the kill row
	FleetBusyRate      int           // events/s into each of them
	FleetMemberTimeout time.Duration // the kill row's --fleet-member-timeout; 0 for the command's default
	FleetLease         time.Duration // the kill row's --lease; 0 for the relay's default
	// The retention section (see retention.go).
	Retention          bool
	RetentionRows      int    // delivered rows retained in the second row of each path
	RetentionDays      int    // simulated days of the week's table
	RetentionDayEvents int    // events a simulated day
	RetentionKeep      int    // days the cleanup keeps
	Bin                string // the entoutbox command the relays run; "" builds it from this module
	BaselineBin        string // an earlier build: each relay row runs with it too, just before
}

func main() {
	cfg := config{DatabaseURL: os.Getenv("DATABASE_URL"), MySQLURL: os.Getenv("MYSQL_URL"), Progress: os.Stderr}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = defaultDatabaseURL
	}
	if cfg.MySQLURL == "" {
		cfg.MySQLURL = defaultMySQLURL
	}
	var paths, skewAggregates, skewInstances, skewInstanceAggregates string
	var consumerSkew, fleetAlone, retentionAlone bool
	flag.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "PostgreSQL URL (env DATABASE_URL)")
	flag.StringVar(&cfg.Broker, "broker", "nats://127.0.0.1:4222", "broker URL the relays publish to and the bench subscribes to")
	flag.StringVar(&paths, "paths", "compatible,fast,fastlog,fast3,wal", "relay rows to run: compatible, fast, fast3 (three fast replicas), fastlog (fast with --delivered-log), wal (needs wal_level=logical), scheduled (the scheduled events' section: fast and wal drains without and with --scheduled-section-waiting events waiting, and the lateness of scheduled deliveries at --rate for --latency-duration); empty for none")
	flag.IntVar(&cfg.Events, "events", 20000, "events emitted before the relay starts, for the drain throughput")
	flag.IntVar(&cfg.Rate, "rate", 500, "events/s of the paced load (one event per transaction)")
	flag.DurationVar(&cfg.LatencyDuration, "latency-duration", 10*time.Second, "how long the paced load runs for the latency columns")
	flag.DurationVar(&cfg.Hold, "hold", 10*time.Second, "how long other transactions are held open during the paced load")
	flag.IntVar(&cfg.EmitTx, "emit-tx", 2000, "transactions per variant when measuring the emit cost (0 skips it)")
	flag.IntVar(&cfg.Retained, "retained", 0, "already-delivered rows inserted before the drain of each row")
	flag.IntVar(&cfg.ScheduledWaiting, "scheduled-waiting", 0, "scheduled events, due days ahead, waiting in the scheduled table during every relay row")
	flag.IntVar(&cfg.ScheduledSectionWaiting, "scheduled-section-waiting", 1_000_000, "scheduled events waiting in the second row of each path of the scheduled section")
	flag.IntVar(&cfg.Aggregates, "aggregates", 1000, "distinct aggregate ids the events are spread over")
	flag.DurationVar(&cfg.PollInterval, "poll-interval", 0, "relay --poll-interval (default: the relay's own)")
	flag.IntVar(&cfg.BatchSize, "batch-size", 0, "relay --batch-size (default: the relay's own)")
	flag.Float64Var(&cfg.NearLimit, "near-limit", 0.6, "rate of the near-limit latency load, as a fraction of the row's drain rate (0 skips it)")
	flag.StringVar(&cfg.RelayProfile, "relay-profile", "", "write a CPU profile of the first relay of each row during its drain to this path prefix (<prefix>.<row>.pprof)")
	flag.StringVar(&cfg.ConsumerProfile, "consumer-profile", "", "write a CPU profile of this process during each consumer row's drain to this path prefix (<prefix>.<consumer>.pprof)")
	flag.DurationVar(&cfg.ProfileFor, "profile-for", 5*time.Second, "how long --relay-profile profiles (raise --events to keep the drain going that long)")
	flag.IntVar(&cfg.ConsumerEvents, "consumer-events", 20000, "backlog in JetStream each consumer row drains, also in the SQLite and MariaDB sections (0 skips the consumer section and those rows)")
	flag.IntVar(&cfg.ConsumerAggregates, "consumer-aggregates", 500, "distinct aggregate ids of the consumers' backlog")
	flag.IntVar(&cfg.ConsumerConns, "consumer-conns", 8, "connections of the database floor that commits on many connections at once")
	flag.IntVar(&cfg.ConsumerPerTx, "consumer-per-tx", 100, "events per transaction of the batched database floors")
	flag.BoolVar(&consumerSkew, "consumer-skew", false, "run the consumers' key-skew table alone, at full size: unless given, --paths= --emit-tx 0 --consumer-events 0 --skew-events 10000 --skew-rounds 3")
	flag.IntVar(&cfg.SkewEvents, "skew-events", 1000, "events already in JetStream for each row of the key-skew table (10,000 with --consumer-skew; 0 skips the table)")
	flag.StringVar(&skewAggregates, "skew-aggregates", "1,10,100,1000,10000", "aggregate counts of the key-skew table's one-instance rows")
	flag.StringVar(&skewInstances, "skew-instances", "1,2,3", "instance counts of the key-skew table's rows at --skew-instance-aggregates")
	flag.StringVar(&skewInstanceAggregates, "skew-instance-aggregates", "10,1000", "aggregate counts at which the key-skew table runs each of --skew-instances")
	flag.IntVar(&cfg.SkewRounds, "skew-rounds", 1, "times each row of the key-skew table runs, the rows of one aggregate count taking turns; the table prints the median rate and the range (3 with --consumer-skew)")
	flag.BoolVar(&cfg.SQLite, "sqlite", true, "the SQLite section: emit cost, drain and commit-to-broker latency on a SQLite file and the relay's poll path")
	flag.BoolVar(&cfg.MySQL, "mysql", true, "the MariaDB section: the same measures as --sqlite's on a database of its own on --mysql-url's server (n/a when that server is not reachable)")
	flag.StringVar(&cfg.MySQLURL, "mysql-url", cfg.MySQLURL, "MariaDB/MySQL server URL, naming a database that exists, for the MariaDB section (env MYSQL_URL)")
	flag.BoolVar(&fleetAlone, "fleet", false, "run the fleet section alone, at full size: unless given, --fleet-databases 200 --paths= --emit-tx 0 --consumer-events 0 --skew-events 0 --sqlite=false --mysql=false")
	flag.IntVar(&cfg.FleetDatabases, "fleet-databases", 0, "the fleet section: this many tenant databases (made, then dropped), one relay process over them with one tenant busy at --rate for --latency-duration, beside a single-database relay; "+
		"the process's idle cost; then --fleet-processes sharing them, one killed (0 skips the section)")
	flag.DurationVar(&cfg.FleetIdleAfter, "fleet-idle-after", 10*time.Second, "the fleet processes' --fleet-idle-after")
	flag.DurationVar(&cfg.FleetIdleWindow, "fleet-idle-window", 20*time.Second, "how long the fleet process over parked tenants is measured")
	flag.IntVar(&cfg.FleetProcesses, "fleet-processes", 3, "fleet processes sharing the tenants through a members database, one SIGKILLed during the load (below 2 skips that row)")
	flag.IntVar(&cfg.FleetBacklog, "fleet-backlog", 100000, "the fleet section's backlog row: this many events wait in the busy tenant "+
		"while another tenant takes the paced load under the same fleet (0 skips it)")
	flag.IntVar(&cfg.FleetBusy, "fleet-busy", 10, "busy tenants, spread over the tenants, while a fleet process is killed")
	flag.IntVar(&cfg.FleetBusyRate, "fleet-busy-rate", 20, "events/s into each busy tenant while a fleet process is killed")
	flag.DurationVar(&cfg.FleetMemberTimeout, "fleet-member-timeout", 0, "the fleet processes' --fleet-member-timeout while one is killed (default: the command's)")
	flag.DurationVar(&cfg.FleetLease, "fleet-lease", 0, "the fleet processes' --lease while one is killed (default: the relay's)")
	flag.BoolVar(&retentionAlone, "retention", false, "run the retention section alone: fast and fastlog drained and at --rate on an empty outbox, then beside --retention-rows delivered rows; "+
		"then the outbox's size after --retention-days simulated days (unless given, --paths= --emit-tx 0 --consumer-events 0 --skew-events 0 --sqlite=false --mysql=false)")
	flag.IntVar(&cfg.RetentionRows, "retention-rows", 10_000_000, "the retention section: delivered rows retained in the same table, marked as each path marks them")
	flag.IntVar(&cfg.RetentionDays, "retention-days", 7, "the retention section: simulated days of traffic")
	flag.IntVar(&cfg.RetentionDayEvents, "retention-day-events", 500_000, "the retention section: events a simulated day")
	flag.IntVar(&cfg.RetentionKeep, "retention-keep", 3, "the retention section: days of delivered rows the daily cleanup keeps")
	flag.DurationVar(&cfg.Timeout, "timeout", 3*time.Minute, "longest wait for the events of one phase to arrive")
	flag.StringVar(&cfg.Bin, "bin", "", "the entoutbox command the relays run (default: built from this module)")
	flag.StringVar(&cfg.BaselineBin, "baseline-bin", "", "an earlier build of the entoutbox command (go build -o PATH ./cmd/entoutbox at the commit to compare with): each relay row runs with it first, then with --bin, side by side in one run")
	flag.Parse()
	cfg.Paths = splitList(paths)
	if consumerSkew {
		cfg.skewAlone()
	}
	if fleetAlone {
		cfg.fleetAlone()
	}
	if retentionAlone {
		cfg.retentionAlone()
	}
	for _, l := range []struct {
		flag string
		in   string
		out  *[]int
	}{
		{"skew-aggregates", skewAggregates, &cfg.SkewAggregates},
		{"skew-instances", skewInstances, &cfg.SkewInstances},
		{"skew-instance-aggregates", skewInstanceAggregates, &cfg.SkewInstanceAggregates},
	} {
		var err error
		if *l.out, err = splitInts(l.in); err != nil {
			log.Fatalf("bench: --%s: %v", l.flag, err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		log.Fatalf("bench: %v", err)
	}
}

// skewAlone is --consumer-skew: the key-skew table alone, at full size,
// but for the flags given.
func (cfg *config) skewAlone() {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["paths"] {
		cfg.Paths = nil
	}
	if !given["emit-tx"] {
		cfg.EmitTx = 0
	}
	if !given["consumer-events"] {
		cfg.ConsumerEvents = 0
	}
	if !given["skew-events"] {
		cfg.SkewEvents = 10000
	}
	if !given["skew-rounds"] {
		cfg.SkewRounds = 3
	}
	if !given["sqlite"] {
		cfg.SQLite = false
	}
	if !given["mysql"] {
		cfg.MySQL = false
	}
}

// fleetAlone is --fleet: the fleet section alone, at full size, but for
// the flags given.
func (cfg *config) fleetAlone() {
	given := cfg.sectionAlone()
	if !given["fleet-databases"] {
		cfg.FleetDatabases = 200
	}
}

// retentionAlone is --retention: the retention section alone, but for the
// flags given.
func (cfg *config) retentionAlone() {
	given := cfg.sectionAlone()
	cfg.Retention = true
	if !given["near-limit"] {
		cfg.NearLimit = 0 // the section runs no near-limit load
	}
}

// sectionAlone turns off the sections whose flags were not given (the
// relay rows, the emit cost, the consumers, the key skew, SQLite and
// MariaDB), for a section that runs alone; it returns the flags given.
func (cfg *config) sectionAlone() map[string]bool {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["paths"] {
		cfg.Paths = nil
	}
	for name, n := range map[string]*int{"emit-tx": &cfg.EmitTx, "consumer-events": &cfg.ConsumerEvents, "skew-events": &cfg.SkewEvents} {
		if !given[name] {
			*n = 0
		}
	}
	if !given["sqlite"] {
		cfg.SQLite = false
	}
	if !given["mysql"] {
		cfg.MySQL = false
	}
	return given
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// splitInts reads a comma-separated list of positive numbers.
func splitInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(strings.ReplaceAll(p, "_", ""))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// run measures every row of cfg.Paths, then the emit cost, then the
// consumers, and prints the environment line and the tables to out.
func run(ctx context.Context, out io.Writer, cfg config) error {
	specs, err := rowSpecs(cfg.Paths, cfg.ScheduledWaiting, cfg.ScheduledSectionWaiting)
	if err != nil {
		return err
	}
	specs = withBaseline(specs, cfg.BaselineBin)
	if err := cfg.check(); err != nil {
		return err
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.close()
	conns := watchConnections(e.admin)
	rep, err := measureAll(ctx, e, specs)
	if err != nil {
		return err
	}
	servers := "PostgreSQL " + e.serverVersion
	if rep.mysqlServer != "" {
		servers += ", " + rep.mysqlServer
	}
	fmt.Fprintf(out, "env: %d CPUs, %s, %s, broker %s (events received by a core NATS subscription on the topic's partition subjects, T.*)\n",
		runtime.NumCPU(), runtime.Version(), servers, broker.Redacted(cfg.Broker))
	fmt.Fprintf(out, "flags: %s\n\n", cfg.describe())
	if err := rep.print(out, cfg); err != nil {
		return err
	}
	if rep.fleetErr != nil {
		fmt.Fprintf(out, "\nfleet: n/a (%s)\n", firstLine(rep.fleetErr))
	} else if rep.fleet != nil {
		if err := rep.fleet.print(out); err != nil {
			return err
		}
	}
	if rep.retentionErr != nil {
		fmt.Fprintf(out, "\nretention: n/a (%s)\n", firstLine(rep.retentionErr))
	} else if rep.retention != nil {
		if err := rep.retention.print(out); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	conns.print(out)
	return nil
}

// report is what one run measured; a section that could not run has its
// error instead.
type report struct {
	results      []result
	emitLine     string
	consumers    []consumerResult
	consumersErr error
	skew         []skewResult
	skewErr      error
	sqlite       string
	mysql        string
	mysqlServer  string // its name and version, for the env line
	fleet        *fleetSection
	fleetErr     error
	retention    *retentionSection
	retentionErr error
}

// measureAll measures each row, then the sections the flags ask for.
func measureAll(ctx context.Context, e *env, specs []rowSpec) (report, error) {
	var rep report
	rep.results = make([]result, 0, len(specs))
	for _, s := range specs {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		e.progress("== %s", s.name)
		rep.results = append(rep.results, measureRow(ctx, e, s))
	}
	if e.cfg.EmitTx > 0 {
		e.progress("== emit cost")
		var err error
		if rep.emitLine, err = measureEmitCost(ctx, e); err != nil {
			rep.emitLine = "emit cost: n/a (" + firstLine(err) + ")"
		}
	}
	if e.cfg.SQLite {
		e.progress("== SQLite")
		lines, err := measurePoll(ctx, e, sqlitePoll)
		rep.sqlite = sectionText(sqlitePoll.name, lines, err)
	}
	if e.cfg.MySQL {
		e.progress("== MariaDB")
		rep.mysql, rep.mysqlServer = measureMySQL(ctx, e)
	}
	if e.cfg.ConsumerEvents > 0 {
		e.progress("== consumers")
		rep.consumers, rep.consumersErr = measureConsumers(ctx, e)
	}
	if e.cfg.SkewEvents > 0 {
		e.progress("== consumers, key skew")
		rep.skew, rep.skewErr = measureSkew(ctx, e)
	}
	if e.cfg.FleetDatabases > 0 && ctx.Err() == nil {
		e.progress("== fleet")
		rep.fleet, rep.fleetErr = measureFleet(ctx, e)
	}
	if e.cfg.Retention && ctx.Err() == nil {
		e.progress("== retention")
		rep.retention, rep.retentionErr = measureRetention(ctx, e)
	}
	return rep, ctx.Err()
}

// print writes the report's tables, section by section.
func (rep report) print(out io.Writer, cfg config) error {
	relays, scheduled := splitScheduled(rep.results)
	if len(relays) > 0 {
		if err := printTable(out, relays); err != nil {
			return err
		}
		printDrainCPU(out, relays)
	}
	if len(scheduled) > 0 {
		if len(relays) > 0 {
			fmt.Fprintln(out)
		}
		if err := printScheduledTable(out, scheduled); err != nil {
			return err
		}
		printDrainCPU(out, scheduled)
	}
	if rep.emitLine != "" {
		fmt.Fprintln(out, rep.emitLine)
	}
	for _, section := range []string{rep.sqlite, rep.mysql} {
		if section != "" {
			fmt.Fprintln(out, section)
		}
	}
	if rep.consumersErr != nil {
		fmt.Fprintf(out, "\nconsumers: n/a (%s)\n", firstLine(rep.consumersErr))
	} else if len(rep.consumers) > 0 {
		if err := printConsumerTable(out, cfg, rep.consumers); err != nil {
			return err
		}
	}
	if rep.skewErr != nil {
		fmt.Fprintf(out, "\nconsumers, key skew: n/a (%s)\n", firstLine(rep.skewErr))
	} else if len(rep.skew) > 0 {
		return printSkewTable(out, cfg, rep.skew)
	}
	return nil
}

func (c config) check() error {
	switch {
	case c.Events <= 0:
		return errors.New("--events must be positive")
	case c.Rate <= 0:
		return errors.New("--rate must be positive")
	case c.LatencyDuration <= 0 || c.Hold <= 0 || c.Timeout <= 0:
		return errors.New("--latency-duration, --hold and --timeout must be positive")
	case c.Aggregates <= 0:
		return errors.New("--aggregates must be positive")
	case c.NearLimit < 0 || c.NearLimit > 1:
		return errors.New("--near-limit must be between 0 and 1")
	case c.ConsumerEvents < 0:
		return errors.New("--consumer-events must not be negative")
	case c.ConsumerEvents > 0 && (c.ConsumerAggregates <= 0 || c.ConsumerConns <= 0 || c.ConsumerPerTx <= 0):
		return errors.New("--consumer-aggregates, --consumer-conns and --consumer-per-tx must be positive")
	case c.SkewEvents < 0:
		return errors.New("--skew-events must not be negative")
	case c.SkewEvents > 0 && c.SkewRounds <= 0:
		return errors.New("--skew-rounds must be positive")
	case c.SkewEvents > 0 && len(c.SkewAggregates) == 0 && (len(c.SkewInstances) == 0 || len(c.SkewInstanceAggregates) == 0):
		return errors.New("the key-skew table has no row: give --skew-aggregates, or --skew-instances and --skew-instance-aggregates")
	case slices.ContainsFunc(slices.Concat(c.SkewAggregates, c.SkewInstances, c.SkewInstanceAggregates), func(n int) bool { return n <= 0 }):
		return errors.New("--skew-aggregates, --skew-instances and --skew-instance-aggregates must be positive")
	case len(c.Paths) == 0 && c.EmitTx == 0 && c.ConsumerEvents == 0 && c.SkewEvents == 0 && !c.SQLite && !c.MySQL && c.FleetDatabases == 0 && !c.Retention:
		return errors.New("nothing to run: no --paths, --emit-tx 0, --consumer-events 0, --skew-events 0, --sqlite=false, --mysql=false, --fleet-databases 0 and no --retention")
	case c.Retention && (c.RetentionRows <= 0 || c.RetentionDays <= 0 || c.RetentionDayEvents <= 0 || c.RetentionKeep < 0):
		return errors.New("--retention-rows, --retention-days and --retention-day-events must be positive, --retention-keep not negative")
	case c.FleetDatabases < 0 || c.FleetDatabases > 1000:
		return errors.New("--fleet-databases must be between 0 and 1000")
	case c.FleetDatabases > 0 && (c.FleetIdleAfter <= 0 || c.FleetIdleWindow <= 0):
		return errors.New("--fleet-idle-after and --fleet-idle-window must be positive")
	case c.FleetDatabases > 0 && c.FleetProcesses > 1 && (c.FleetBusy <= 0 || c.FleetBusyRate <= 0):
		return errors.New("--fleet-busy and --fleet-busy-rate must be positive")
	case c.FleetMemberTimeout < 0 || c.FleetLease < 0:
		return errors.New("--fleet-member-timeout and --fleet-lease must not be negative")
	case c.Retained < 0 || c.EmitTx < 0 || c.BatchSize < 0 || c.PollInterval < 0:
		return errors.New("--retained, --emit-tx, --batch-size and --poll-interval must not be negative")
	case c.ScheduledWaiting < 0 || c.ScheduledSectionWaiting < 0:
		return errors.New("--scheduled-waiting and --scheduled-section-waiting must not be negative")
	}
	return nil
}

func (c config) describe() string {
	s := fmt.Sprintf("paths=%s events=%d rate=%d/s latency-duration=%s hold=%s emit-tx=%d retained=%d aggregates=%d payload=%dB",
		strings.Join(c.Paths, ","), c.Events, c.Rate, c.LatencyDuration, c.Hold, c.EmitTx, c.Retained, c.Aggregates, payloadSize)
	if c.ScheduledWaiting > 0 {
		s += fmt.Sprintf(" scheduled-waiting=%d", c.ScheduledWaiting)
	}
	if slices.Contains(c.Paths, scheduledSection) {
		s += fmt.Sprintf(" scheduled-section-waiting=%d", c.ScheduledSectionWaiting)
	}
	if c.PollInterval > 0 {
		s += fmt.Sprintf(" poll-interval=%s", c.PollInterval)
	}
	if c.BatchSize > 0 {
		s += fmt.Sprintf(" batch-size=%d", c.BatchSize)
	}
	if c.NearLimit > 0 {
		s += fmt.Sprintf(" near-limit=%.0f%% of the drain rate", c.NearLimit*100)
	}
	if c.ConsumerEvents > 0 {
		s += fmt.Sprintf(" consumer-events=%d consumer-aggregates=%d consumer-conns=%d consumer-per-tx=%d",
			c.ConsumerEvents, c.ConsumerAggregates, c.ConsumerConns, c.ConsumerPerTx)
	}
	if c.SkewEvents > 0 {
		s += fmt.Sprintf(" skew-events=%d skew-aggregates=%s skew-instances=%s skew-instance-aggregates=%s skew-rounds=%d",
			c.SkewEvents, joinInts(c.SkewAggregates), joinInts(c.SkewInstances), joinInts(c.SkewInstanceAggregates), c.SkewRounds)
	}
	if c.FleetDatabases > 0 {
		s += fmt.Sprintf(" fleet-databases=%d fleet-idle-after=%s fleet-idle-window=%s", c.FleetDatabases, c.FleetIdleAfter, c.FleetIdleWindow)
		if c.FleetProcesses > 1 {
			s += fmt.Sprintf(" fleet-processes=%d fleet-busy=%d fleet-busy-rate=%d/s", c.FleetProcesses, c.FleetBusy, c.FleetBusyRate)
		}
	}
	if c.Retention {
		s += fmt.Sprintf(" retention-rows=%d retention-days=%d retention-day-events=%d retention-keep=%dd",
			c.RetentionRows, c.RetentionDays, c.RetentionDayEvents, c.RetentionKeep)
	}
	return s
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// printTable writes one aligned table. Notes come last, unterminated, so
// that tabwriter leaves them out of the column widths; a row that could not
// run at all has n/a in every cell and its reason as its note.
func printTable(out io.Writer, results []result) error {
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "relay\tdrain ev/s\tp50\tp99\tmax\tnear-limit ev/s\tp50\tp99\tp99 held-tx\tmax held-tx\tpeak RSS\tnotes")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(tw, "%s%s\tn/a (%s)\n", r.name, strings.Repeat("\tn/a", 10), firstLine(r.err))
			continue
		}
		nearRate := "-"
		if r.nearRate > 0 {
			nearRate = thousands(int64(r.nearRate))
		}
		drain, rss := r.drainCell(), r.rssCell()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, drain,
			fmtDur(r.latency.p50, r.latency.n), fmtDur(r.latency.p99, r.latency.n), fmtDur(r.latency.max, r.latency.n),
			nearRate, fmtDur(r.near.p50, r.near.n), fmtDur(r.near.p99, r.near.n),
			fmtDur(r.held.p99, r.held.n), fmtDur(r.held.max, r.held.n), rss, strings.Join(r.notes, "; "))
	}
	return tw.Flush()
}

// drainCell is the row's drain rate as the tables show it, "-" when not
// measured.
func (r result) drainCell() string {
	if r.drainRate > 0 {
		return thousands(int64(r.drainRate + 0.5))
	}
	return "-"
}

// rssCell is the row's peak RSS as the tables show it, "-" when not
// measured.
func (r result) rssCell() string {
	if r.peakKB > 0 {
		return fmt.Sprintf("%d MB", (r.peakKB+512)/1024)
	}
	return "-"
}

// printDrainCPU says, per row, where the CPU of the drain went: every
// process shares the machine, so the drain rate is what they leave each
// other.
func printDrainCPU(out io.Writer, results []result) {
	printPerRow(out, results, "drain CPU per event, from /proc (relay processes, PostgreSQL, the broker, this bench's receiver, the rest):",
		func(r result) string { return r.drainCPU })
	printPerRow(out, results, "near-limit CPU per event, emitting and relaying at once (the bench column is the emitter and receiver):",
		func(r result) string { return r.nearCPU })
}

// printPerRow writes header and then each row's name and value, unless
// no row has a value.
func printPerRow(out io.Writer, results []result, header string, value func(result) string) {
	for _, r := range results {
		v := value(r)
		if v == "" {
			continue
		}
		if header != "" {
			fmt.Fprintln(out, header)
			header = ""
		}
		fmt.Fprintf(out, "  %s: %s\n", r.name, v)
	}
}

// firstLine is the first line of err, without the prefix the entoutbox
// command puts on its errors.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimPrefix(strings.TrimSpace(s), "entoutbox: ")
}

// fmtDur prints d with a precision that suits its size; "-" when nothing was
// measured.
func fmtDur(d time.Duration, n int) string {
	switch {
	case n == 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}

// thousands prints n with comma separators: 20000 → "20,000".
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
