package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/mysqldb"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/sqlitedb"
	"github.com/entoutbox/entoutbox/tracing"
)

// relayOptions are the relay command's flags. Those of the relay's
// settings go straight into cfg, each flag to one field, zero when not
// given: the relay fills in its defaults, those of the chosen path.
type relayOptions struct {
	databaseURL, listenDatabaseURL, table, brokerURL, path string
	logLevel, logFormat, metricsAddr                       string
	cloudEventsSource, cloudEventsDataSchemaBase           string
	cloudEventsPrefix                                      string
	databasesFile                                          string
	fleetDatabaseURL, fleetMemberID                        string
	registryURL, registryTable                             string
	pprof, fleetListen                                     bool
	fleetIdleAfter, fleetMemberTimeout, fleetTurn          time.Duration
	fleetBacklogInterval                                   time.Duration
	metricsTenants, fleetProbeConcurrency                  int
	maxConns                                               int
	cfg                                                    relay.Config
}

// pathFlags are the flags of the settings only some read paths use, and
// which (relay.Config.Validate refuses the same settings); every other
// flag applies to every path. Their help says so, and one given for
// another path is an error rather than ignored.
var pathFlags = map[string][]relay.Path{
	"poll-interval":       {relay.PathFast, relay.PathCompatible, relay.PathPoll},
	"concurrency":         {relay.PathFast, relay.PathWAL, relay.PathPoll},
	"max-bytes-in-flight": {relay.PathFast, relay.PathWAL},
	"max-attempts":        {relay.PathFast, relay.PathWAL, relay.PathPoll},
	"lease":               {relay.PathFast},
	"partitions":          {relay.PathFast},
	"poll-only":           {relay.PathFast},
	"delete-delivered":    {relay.PathFast},
	"delivered-log":       {relay.PathFast},
	"relay-id":            {relay.PathFast},
	"listen-database-url": {relay.PathFast},
	"consumer-group":      {relay.PathCompatible},
	"slot":                {relay.PathWAL},
	"publication":         {relay.PathWAL},
	"replication-url":     {relay.PathWAL},
}

func newRelayCommand() *cobra.Command {
	o := &relayOptions{}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Relay committed outbox events to a broker until SIGINT or SIGTERM",
		Long: `relay reads committed rows of the outbox table and publishes each event to its
topic on the broker, at least once and in order per aggregate. A row is marked
delivered only after the broker acknowledged it. On SIGINT or SIGTERM it
finishes in-flight publishes, records them, and exits.

Brokers, by URL:
  nats://127.0.0.1:4222                 NATS JetStream
  amqp://guest:guest@127.0.0.1:5672/    RabbitMQ
  redis://127.0.0.1:6379/0              Redis Streams
  kafka://host1:9092,host2:9092         Kafka
  postgres://...                        PostgreSQL itself (watermill-sql tables)
  mem://                                in-process (for tests and demos)

A flag marked for some read paths only is refused on the others.

Traces: with OTEL_EXPORTER_OTLP_ENDPOINT set (or OTEL_TRACES_EXPORTER), the relay
exports a span per publish, the child of the span the event was emitted in,
over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf, the default, or grpc), as
service OTEL_SERVICE_NAME (default entoutbox-relay), and sends the last ones at
shutdown. Off when unset, or with OTEL_TRACES_EXPORTER=none.`,
		Example: `  entoutbox relay --database-url postgres://postgres@127.0.0.1:5432/app --broker nats://127.0.0.1:4222
  ENTOUTBOX_DATABASE_URL=postgres://... ENTOUTBOX_BROKER=amqp://guest:guest@127.0.0.1:5672/ entoutbox relay`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			redact := newRedactor(o.databaseURL, o.listenDatabaseURL, o.brokerURL, o.cfg.WAL.ReplicationURL)
			// A library's error may quote a URL it was given.
			return redact.Error(o.run(cmd.Context(), cmd.Flags(), cmd.ErrOrStderr(), redact))
		},
	}
	addDatabaseFlags(cmd, &o.databaseURL, &o.table)
	o.addFlags(cmd.Flags())
	return cmd
}

// addFlags adds the relay's flags to f, the relay's settings bound to
// their fields of o.cfg, and marks each of pathFlags with its paths.
func (o *relayOptions) addFlags(f *pflag.FlagSet) {
	cfg := &o.cfg
	f.StringVar(&o.brokerURL, "broker", "", "broker URL: nats://, amqp://, redis://, kafka://, postgres:// or mem:// (env ENTOUTBOX_BROKER)")
	f.StringVar(&o.path, "path", string(relay.PathFast), "read path: fast (batched claims, concurrent publishes), compatible (watermill-sql subscriber + forwarder) "+
		"or wal (PostgreSQL logical replication: needs wal_level=logical and a role with REPLICATION); "+
		"on SQLite (--database-url sqlite:PATH) poll, the only path there; on MySQL/MariaDB (mysql://…) poll, the default there, or compatible")
	f.StringVar(&cfg.TopicPrefix, "topic-prefix", "", "prepended to every destination topic, e.g. staging_")
	f.StringVar(&cfg.DeadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	f.StringVar(&cfg.ScheduledTable, "scheduled-table", "", "table of the events emitted for a later time, moved into the outbox "+
		"when due by the database's clock; none moved when it does not exist (default outbox_scheduled_events)")
	f.StringVar(&cfg.SequenceTable, "sequence-table", "", "table of the aggregates' counters a due scheduled event is numbered from; "+
		"no numbers when it does not exist (default outbox_aggregate_sequences)")
	f.DurationVar(&cfg.CloseTimeout, "close-timeout", relay.DefaultCloseTimeout, "how long shutdown waits for in-flight publishes")

	f.IntVar(&cfg.BatchSize, "batch-size", 0, fmt.Sprintf("rows held at once (default %d; %d on the compatible path)",
		relay.DefaultBatchSize, relay.DefaultCompatibleBatchSize))
	f.DurationVar(&cfg.RetryInterval, "retry-interval", 0, fmt.Sprintf("wait before a failed publish is tried again "+
		"(default %s, doubling up to %s; a fixed %s on the compatible path)",
		relay.DefaultRetryInterval, relay.DefaultMaxBackoff, relay.DefaultCompatibleRetryInterval))
	f.DurationVar(&cfg.PollInterval, "poll-interval", 0, fmt.Sprintf("how often an idle relay looks for new rows without a notification "+
		"(default %s; %s on the compatible path, %s on the poll path)", relay.DefaultPollInterval, relay.DefaultCompatiblePollInterval,
		relay.DefaultSQLitePollInterval))
	f.IntVar(&o.maxConns, "max-connections", defaultRelayConns, fmt.Sprintf("connections to --database-url the relay holds at most "+
		"(at least %d): its LISTEN, its liveness lock, its claims, the scheduled events' LISTEN and its other statements", minRelayConns))
	f.IntVar(&cfg.Concurrency, "concurrency", 0, fmt.Sprintf("publishes in flight at once (default %d)", relay.DefaultConcurrency))
	f.Var((*byteSize)(&cfg.MaxBytesInFlight), "max-bytes-in-flight", fmt.Sprintf("payload and header bytes held at once, "+
		"read and not yet recorded as delivered, e.g. 64MiB; a larger row is sent alone (default %s)", byteSize(relay.DefaultMaxBytesInFlight)))
	f.IntVar(&cfg.MaxAttempts, "max-attempts", 0, fmt.Sprintf("failed publishes of one event before it goes to the dead letters (default %d)",
		relay.DefaultMaxAttempts))

	f.DurationVar(&cfg.Fast.Lease, "lease", 0, fmt.Sprintf("how long a relay owns its partitions unrenewed; "+
		"a dead relay's go to the others after it (default %s)", relay.DefaultLease))
	f.IntVar(&cfg.Fast.Partitions, "partitions", 0, fmt.Sprintf("parts the aggregates are hashed into and shared out among relays; "+
		"the same on every relay of a table (default %d)", relay.DefaultPartitions))
	f.BoolVar(&cfg.Fast.PollOnly, "poll-only", false, "behind PgBouncer in transaction mode: poll (no LISTEN unless --listen-database-url), "+
		"no liveness lock (a relay that dies is taken over when its lease ends)")
	f.BoolVar(&cfg.Fast.Delete, "delete-delivered", false, "delete delivered rows instead of stamping delivered_at")
	f.BoolVar(&cfg.Fast.DeliveredLog, "delivered-log", false, "record delivered rows' ids in a narrow log table instead of stamping delivered_at (the rows are not rewritten; kept for replay until cleanup)")
	f.StringVar(&cfg.Fast.RelayID, "relay-id", "", "name of this relay in the partition table (default random)")
	f.StringVar(&o.listenDatabaseURL, "listen-database-url", "", "direct PostgreSQL URL of the same database to LISTEN on, when --database-url "+
		"goes through PgBouncer in transaction mode (with --poll-only); claims and writes still use --database-url")

	f.StringVar(&cfg.Compatible.ConsumerGroup, "consumer-group", "", fmt.Sprintf("name of the relay's read position; "+
		"relays sharing it share the work; on MySQL all the relays of an outbox share one: leave it unset (default %s)", relay.DefaultConsumerGroup))

	f.StringVar(&cfg.WAL.Slot, "slot", "", "replication slot, created when absent (default <table>_wal)")
	f.StringVar(&cfg.WAL.Publication, "publication", "", "publication of the table's inserts, created when absent (default <table>_wal)")
	f.StringVar(&cfg.WAL.ReplicationURL, "replication-url", "", "PostgreSQL URL of the replication connection, when --database-url "+
		"goes through a pooler (default --database-url)")

	o.addFleetFlags(f)
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json (one JSON object a line)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. :9090 (off when empty)")
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on --metrics-addr (for measuring; keep the address private)")
	f.StringVar(&o.cloudEventsSource, "cloudevents-source", "", "make every message a CloudEvents 1.0 event in binary mode (headers named as "+
		"the broker's binding names them, see --cloudevents-prefix) with this source, e.g. urn:shop:orders (off when empty)")
	f.StringVar(&o.cloudEventsDataSchemaBase, "cloudevents-dataschema-base", "", "URI the generated JSON Schemas (the ent package's entoutbox/) "+
		"are published under; the dataschema attribute is it joined with schemas/<event>.v<N>.json (with --cloudevents-source)")
	f.StringVar(&o.cloudEventsPrefix, "cloudevents-prefix", "", "prefix of the CloudEvents attribute keys: ce_ (Kafka), ce- (NATS), "+
		"cloudEvents_ or cloudEvents: (AMQP) (default the --broker's binding: ce- on nats, cloudEvents_ on amqp, else ce_; with --cloudevents-source); "+
		"datacontenttype is the content-type header on Kafka, the content-type property on AMQP, ce-datacontenttype on NATS")

	for name, paths := range pathFlags {
		fl := f.Lookup(name)
		fl.Usage = withNote(fl.Usage, pathsOnly(paths))
	}
}

// withNote adds note to a flag's usage, inside the parentheses of the
// default it ends with, if any: "... (default 30s; fast path only)".
func withNote(usage, note string) string {
	if i := strings.LastIndex(usage, "("); i >= 0 && strings.HasPrefix(usage[i:], "(default ") && strings.HasSuffix(usage, ")") {
		return usage[:len(usage)-1] + "; " + note + ")"
	}
	return usage + " (" + note + ")"
}

// pathsOnly names paths: "fast path only", "fast and wal paths only".
func pathsOnly(paths []relay.Path) string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = string(p)
	}
	if len(names) == 1 {
		return names[0] + " path only"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " paths only"
}

// check refuses what cannot work before anything is opened: a missing
// broker, flags that need another, an unknown path, and a flag given (on
// the command line or through the environment) for a path that does not
// use it.
func (o *relayOptions) check(flags *pflag.FlagSet) error {
	if (sqlitedb.IsURL(o.databaseURL) || mysqldb.IsURL(o.databaseURL)) && !flags.Changed("path") {
		o.path = string(relay.PathPoll) // SQLite's and MySQL's path
	}
	path := relay.Path(o.path)
	switch {
	case o.brokerURL == "":
		return errors.New("no broker: set --broker or ENTOUTBOX_BROKER")
	case o.pprof && o.metricsAddr == "":
		return errors.New("--pprof serves the profiles on --metrics-addr: set it too")
	case o.cloudEventsDataSchemaBase != "" && o.cloudEventsSource == "":
		return errors.New("--cloudevents-dataschema-base needs --cloudevents-source")
	case o.cloudEventsPrefix != "" && o.cloudEventsSource == "":
		return errors.New("--cloudevents-prefix needs --cloudevents-source")
	case !o.fleet() && o.maxConns < minRelayConns:
		return fmt.Errorf("--max-connections %d: the relay needs at least %d", o.maxConns, minRelayConns)
	case path != relay.PathFast && path != relay.PathCompatible && path != relay.PathWAL && path != relay.PathPoll:
		return fmt.Errorf("--path %q: want %s, %s, %s or %s", o.path, relay.PathFast, relay.PathCompatible, relay.PathWAL, relay.PathPoll)
	}
	if err := o.checkFleet(flags); err != nil {
		return err
	}
	if err := o.checkMySQLPath(path); err != nil {
		return err
	}
	var err error
	flags.Visit(func(f *pflag.Flag) {
		paths, ok := pathFlags[f.Name]
		if err != nil || !ok || slices.Contains(paths, path) {
			return
		}
		err = fmt.Errorf("%s applies to the %s; this relay runs the %s path", givenAs(f), pathsOnly(paths), path)
	})
	return err
}

// checkMySQLPath refuses, on a MySQL URL, a path MySQL does not run and a
// consumer group of the compatible path's own: its relays all share the
// rows' delivered_at there.
func (o *relayOptions) checkMySQLPath(path relay.Path) error {
	if !mysqldb.IsURL(o.databaseURL) {
		return nil
	}
	group := o.cfg.Compatible.ConsumerGroup
	switch {
	case path != relay.PathPoll && path != relay.PathCompatible:
		return fmt.Errorf("--path %s needs PostgreSQL; on MySQL/MariaDB the relay runs the poll path (the default there) or the compatible path", path)
	case path == relay.PathCompatible && group != "" && group != relay.DefaultConsumerGroup:
		return fmt.Errorf("--consumer-group %q: on MySQL/MariaDB the compatible path's relays all read the rows not yet delivered, "+
			"one position for the outbox; leave it unset", group)
	}
	return nil
}

// config is the relay's configuration from the flags, but for what the
// command opens: DB, Publisher, Fast.ListenDB, Logger and Metrics.
func (o *relayOptions) config() relay.Config {
	cfg := o.cfg
	cfg.Table, cfg.Path = o.table, relay.Path(o.path)
	if o.cloudEventsSource != "" {
		prefix := o.cloudEventsPrefix
		if prefix == "" {
			scheme, _, _ := strings.Cut(o.brokerURL, ":")
			prefix = relay.CloudEventsPrefixFor(scheme)
		}
		cfg.CloudEvents = &relay.CloudEvents{Source: o.cloudEventsSource, DataSchemaBase: o.cloudEventsDataSchemaBase, Prefix: prefix}
	}
	return cfg
}

// run runs the relay until ctx ends, logging to w.
func (o *relayOptions) run(ctx context.Context, flags *pflag.FlagSet, w io.Writer, redact redactor) error {
	if err := o.check(flags); err != nil {
		return err
	}
	if o.fleet() {
		return o.runFleet(ctx, flags, w, redact)
	}
	logger, wmLogger, stopTraces, err := o.start(ctx, w, redact)
	if err != nil {
		return err
	}
	defer stopTraces()
	cfg := o.config()
	closeDBs, err := o.openDBs(&cfg, logger, redact)
	if err != nil {
		return err
	}
	defer closeDBs()
	b, err := broker.Open(ctx, o.brokerURL, broker.Options{Logger: wmLogger})
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.Publisher, cfg.Logger = b.Publisher(), wmLogger
	cfg.MessagingSystem = broker.MessagingSystem(b.Scheme()) // the spans' messaging.system
	var reg *prometheus.Registry
	if o.metricsAddr != "" {
		reg = prometheus.NewRegistry()
		if cfg.Metrics, err = newMetrics(reg, cfg.DB, metrics.BacklogConfig{Table: o.table, DeadLetterTable: cfg.DeadLetterTable,
			ScheduledTable: cfg.ScheduledTable}, logger); err != nil {
			return err
		}
	}
	r, err := relay.New(cfg)
	if err != nil {
		return err
	}
	if reg != nil {
		stopOps, err := o.serveOps(reg, r.Ready, logger, redact)
		if err != nil {
			return err
		}
		defer stopOps()
	}
	return o.runLogged(ctx, r, logger, redact)
}

// start is what the relay and the fleet begin with: the loggers, the GC
// tuned to the bytes in flight, and the traces, which stop ends.
func (o *relayOptions) start(ctx context.Context, w io.Writer, redact redactor) (*slog.Logger, watermill.LoggerAdapter, func(), error) {
	logger, wmLogger, err := newLoggers(w, o.logLevel, o.logFormat, redact)
	if err != nil {
		return nil, nil, nil, err
	}
	tuneGC(o.cfg.MaxBytesInFlight)
	stopTraces, err := startTraces(ctx, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	return logger, wmLogger, stopTraces, nil
}

// serveOps serves reg's metrics (and pprof when asked) on --metrics-addr,
// alive until stop.
func (o *relayOptions) serveOps(reg *prometheus.Registry, ready func(context.Context) error, logger *slog.Logger, redact redactor) (stop func(), err error) {
	ops, err := startOpsServer(o.metricsAddr, reg, ready, logger, redact, o.pprof)
	if err != nil {
		return nil, err
	}
	ops.setAlive(true)
	return func() {
		ops.setAlive(false)
		ops.close()
	}, nil
}

// startTraces exports traces as the OTEL_ environment variables say; stop
// sends the last spans.
func startTraces(ctx context.Context, logger *slog.Logger) (stop func(), err error) {
	stopTraces, err := tracing.FromEnv(ctx, "entoutbox-relay")
	if err != nil {
		return nil, err
	}
	if _, on := otel.GetTracerProvider().(*sdktrace.TracerProvider); on {
		logger.Info("Exporting traces as the OTEL_ environment variables say")
	}
	return func() {
		// ctx has ended: the spans not yet sent get a moment of their own.
		fctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		defer cancel()
		if err := stopTraces(fctx); err != nil {
			logger.Warn("Sending the last spans failed", "error", err)
		}
	}, nil
}

// openDBs opens the relay's pool on --database-url into cfg.DB and, when
// given, the one on --listen-database-url into cfg.Fast.ListenDB; closeAll
// closes them.
func (o *relayOptions) openDBs(cfg *relay.Config, logger *slog.Logger, redact redactor) (closeAll func(), err error) {
	db, err := openServiceDB(o.databaseURL, relayApplicationName, logger, redact)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(o.maxConns)
	db.SetMaxIdleConns(o.maxConns) // kept, not opened and closed all the time
	cfg.DB = db
	if o.listenDatabaseURL == "" {
		return func() { db.Close() }, nil
	}
	listen, err := openServiceDB(o.listenDatabaseURL, relayApplicationName, logger, redact)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("--listen-database-url: %w", err)
	}
	listen.SetMaxOpenConns(listenConns)
	cfg.Fast.ListenDB = listen
	return func() { listen.Close(); db.Close() }, nil
}

// runLogged runs r until ctx ends, logging "Relay started" once it is ready
// and "Relay stopped" when it stopped without an error.
func (o *relayOptions) runLogged(ctx context.Context, r *relay.Relay, logger *slog.Logger, redact redactor) error {
	started := []any{"broker", redact.String(o.brokerURL), "database", redact.String(o.databaseURL), "path", o.path}
	if o.listenDatabaseURL != "" {
		started = append(started, "listen_database", redact.String(o.listenDatabaseURL))
	}
	// "Relay started" says the relay delivers: it waits for the database
	// and the broker to answer and the relay to run (its readiness).
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		logWhenReady(wctx, r.Ready, logger, redact, started)
	}()
	err := r.Run(ctx)
	stopWatch()
	<-watched
	if err != nil {
		return err
	}
	logger.Info("Relay stopped")
	return nil
}

// readyPoll is how often logWhenReady asks whether the relay is ready.
const readyPoll = 250 * time.Millisecond

// logWhenReady logs "Relay started" with attrs once ready answers nil:
// the database and the broker answered and the relay runs. Until then it
// says, once, what it waits for. It returns once it logged, or when ctx
// ends.
func logWhenReady(ctx context.Context, ready func(context.Context) error, logger *slog.Logger, redact redactor, attrs []any) {
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	waiting := false
	for {
		err := ready(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			logger.Info("Relay started", attrs...)
			return
		}
		if !waiting {
			waiting = true
			logger.Info("Relay waiting to start: the database and the broker must answer", "reason", redact.String(err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// The relay's connections (docs/operations.md, Connections). Its pool on
// --database-url holds, each for as long as it runs, the LISTEN
// connection, the liveness lock's session, the claims' connection and the
// scheduled events' LISTEN; its other statements (acks, lease renewals,
// dead letters, metrics, cleanup) borrow the rest for a moment. The WAL
// path's replication connection is outside the pool, one more.
const (
	relayApplicationName = "entoutbox relay"
	defaultRelayConns    = 10
	minRelayConns        = 6 // the four it holds and two for its statements
	listenConns          = 2 // on --listen-database-url: the two LISTENs
)

// traceFlushTimeout bounds the sending of the last spans at shutdown.
const traceFlushTimeout = 10 * time.Second

// tuneGC sets the garbage collector for the relay, unless the environment
// does (GOGC, GOMEMLIMIT). Its live heap is small and bounded by
// --batch-size: a rarer GC costs some 20 MB and saves about a sixth of
// its CPU per event (bench). With large payloads the live heap is a few
// copies of --max-bytes-in-flight (maxBytes, 0 for the default: the rows
// held, and the broker client's copies of those being published): a soft
// limit above that keeps the rarer GC from letting garbage pile up to
// several times it.
func tuneGC(maxBytes int64) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if maxBytes == 0 {
		maxBytes = relay.DefaultMaxBytesInFlight
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(min(3*maxBytes, 1<<62) + 64<<20)
	}
}

// newMetrics registers on reg the Go runtime's and the process's
// collectors and the library's metrics, whose backlog gauges sample db
// (PostgreSQL or MySQL: on SQLite there are none, and logger says so).
func newMetrics(reg *prometheus.Registry, db *sql.DB, backlog metrics.BacklogConfig, logger *slog.Logger) (*metrics.Metrics, error) {
	if err := registerRuntime(reg); err != nil {
		return nil, err
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	if outboxdb.DialectOfDB(db) == outboxdb.SQLite {
		logger.Info("on SQLite /metrics has the relay's counters, not the backlog gauges (pending events, lag, dead letters)")
		return m, nil
	}
	if err := m.WatchBacklog(db, backlog); err != nil {
		return nil, err
	}
	return m, nil
}

// registerRuntime registers on reg the Go runtime's and the process's
// collectors.
func registerRuntime(reg *prometheus.Registry) error {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return err
	}
	return reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// byteSize is a flag of bytes: a number, or one with a unit (KB, MB, GB
// or KiB, MiB, GiB; B alone is bytes).
type byteSize int64

var byteUnits = []struct {
	suffix string
	n      int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

func (b *byteSize) Set(v string) error {
	s, unit := strings.TrimSpace(v), int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			s, unit = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/unit {
		return fmt.Errorf("%q is not a positive size in bytes (e.g. 67108864, 64MiB or 64MB)", v)
	}
	*b = byteSize(n * unit)
	return nil
}

func (b byteSize) String() string {
	n := int64(b)
	for _, u := range byteUnits[:3] {
		if n >= u.n && n%u.n == 0 && (n/u.n < 1<<10 || u.suffix == "GiB") {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (*byteSize) Type() string { return "bytes" }
