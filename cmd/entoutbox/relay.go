package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay"
)

// relayOptions are the relay command's flags.
type relayOptions struct {
	databaseURL, listenDatabaseURL, table, brokerURL, path string
	replicationURL                                         string
	logLevel, logFormat, metricsAddr                       string
	cloudEventsSource, cloudEventsDataSchemaBase           string
	pprof                                                  bool
	cfg                                                    relay.Config
	// The flags shared by both read paths, given to the chosen one.
	batchSize                   int
	pollInterval, retryInterval time.Duration
}

func newRelayCommand() *cobra.Command {
	o := &relayOptions{}
	cfg := &o.cfg
	fast := &cfg.Fast.Subscriber
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
  mem://                                in-process (for tests and demos)`,
		Example: `  entoutbox relay --database-url postgres://postgres@127.0.0.1:5432/app --broker nats://127.0.0.1:4222
  ENTOUTBOX_DATABASE_URL=postgres://... ENTOUTBOX_BROKER=amqp://guest:guest@127.0.0.1:5672/ entoutbox relay`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			redact := newRedactor(o.databaseURL, o.listenDatabaseURL, o.brokerURL, o.replicationURL)
			// A library's error may quote a URL it was given.
			return redact.Error(runRelay(cmd.Context(), cmd.ErrOrStderr(), o, redact))
		},
	}
	addDatabaseFlags(cmd, &o.databaseURL, &o.table)
	f := cmd.Flags()
	f.StringVar(&o.brokerURL, "broker", "", "broker URL: nats://, amqp://, redis://, kafka://, postgres:// or mem:// (env ENTOUTBOX_BROKER)")
	f.StringVar(&o.path, "path", string(relay.PathFast), "read path: fast (batched claims, concurrent publishes), compatible (watermill-sql subscriber + forwarder) "+
		"or wal (PostgreSQL logical replication: needs wal_level=logical and a role with REPLICATION)")
	f.StringVar(&cfg.WAL.Slot, "slot", "", "replication slot, created when absent (default <table>_wal; wal path)")
	f.StringVar(&cfg.WAL.Publication, "publication", "", "publication of the table's inserts, created when absent (default <table>_wal; wal path)")
	f.StringVar(&o.replicationURL, "replication-url", "", "PostgreSQL URL of the replication connection, when --database-url goes through a pooler "+
		"(default --database-url; wal path)")
	f.StringVar(&cfg.Compatible.ConsumerGroup, "consumer-group", "", "name of the relay's read position; relays sharing it share the work (default entoutbox_relay)")
	f.StringVar(&cfg.TopicPrefix, "topic-prefix", "", "prepended to every destination topic, e.g. staging_")
	f.StringVar(&cfg.DeadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	f.IntVar(&o.batchSize, "batch-size", 0, fmt.Sprintf("rows held at once (default %d fast, %d compatible)",
		relay.DefaultBatchSize, relay.DefaultCompatibleBatchSize))
	fast.MaxBytesInFlight = relay.DefaultMaxBytesInFlight
	f.Var((*byteSize)(&fast.MaxBytesInFlight), "max-bytes-in-flight", "payload and header bytes held at once, "+
		"claimed and not yet recorded as delivered, e.g. 64MiB; a larger row is sent alone (fast path)")
	f.IntVar(&cfg.Fast.Concurrency, "concurrency", relay.DefaultConcurrency, "publishes in flight at once (fast path)")
	f.DurationVar(&fast.Lease, "lease", relay.DefaultLease, "how long a relay owns its partitions unrenewed; a dead relay's go to the others after it (fast path)")
	f.IntVar(&fast.Partitions, "partitions", relay.DefaultPartitions, "parts the aggregates are hashed into and shared out among relays; the same on every relay of a table (fast path)")
	f.BoolVar(&fast.PollOnly, "poll-only", false, "behind PgBouncer in transaction mode: poll (no LISTEN unless --listen-database-url), no liveness lock (a relay that dies is taken over when its lease ends)")
	f.BoolVar(&fast.Delete, "delete-delivered", false, "delete delivered rows instead of stamping delivered_at (fast path)")
	f.IntVar(&fast.MaxAttempts, "max-attempts", relay.DefaultMaxAttempts, "failed publishes of one event before it goes to the dead letters (fast path)")
	f.StringVar(&fast.RelayID, "relay-id", "", "name of this relay in the partition table (default random)")
	f.DurationVar(&o.pollInterval, "poll-interval", 0, fmt.Sprintf("how often an idle relay looks for new rows without a notification (default %s fast, %s compatible)",
		relay.DefaultPollInterval, relay.DefaultCompatiblePollInterval))
	f.DurationVar(&o.retryInterval, "retry-interval", 0, fmt.Sprintf("wait before a failed publish is tried again (default %s fast, doubling up to %s; %s compatible)",
		relay.DefaultRetryInterval, relay.DefaultMaxBackoff, relay.DefaultCompatibleRetryInterval))
	f.DurationVar(&cfg.CloseTimeout, "close-timeout", relay.DefaultCloseTimeout, "how long shutdown waits for in-flight publishes")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json (one JSON object a line)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. :9090 (off when empty)")
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on --metrics-addr (for measuring; keep the address private)")
	f.StringVar(&o.listenDatabaseURL, "listen-database-url", "", "direct PostgreSQL URL of the same database to LISTEN on, when --database-url "+
		"goes through PgBouncer in transaction mode (with --poll-only); claims and writes still use --database-url (fast path)")
	f.StringVar(&o.cloudEventsSource, "cloudevents-source", "", "make every message a CloudEvents 1.0 event in binary mode (ce_ metadata) with this ce_source, e.g. urn:shop:orders (off when empty)")
	f.StringVar(&o.cloudEventsDataSchemaBase, "cloudevents-dataschema-base", "", "URI the generated JSON Schemas (the ent package's entoutbox/) are published under; "+
		"ce_dataschema is it joined with schemas/<event>.v<N>.json (with --cloudevents-source)")
	return cmd
}

// runRelay runs the relay of o until ctx ends, logging to w.
func runRelay(ctx context.Context, w io.Writer, o *relayOptions, redact redactor) error {
	cfg := o.cfg
	fast := &cfg.Fast.Subscriber
	if o.brokerURL == "" {
		return errors.New("no broker: set --broker or ENTOUTBOX_BROKER")
	}
	if o.pprof && o.metricsAddr == "" {
		return errors.New("--pprof serves the profiles on --metrics-addr: set it too")
	}
	if o.cloudEventsDataSchemaBase != "" && o.cloudEventsSource == "" {
		return errors.New("--cloudevents-dataschema-base needs --cloudevents-source")
	}
	if o.listenDatabaseURL != "" && relay.Path(o.path) == relay.PathCompatible {
		return errors.New("--listen-database-url is for the fast path; the compatible path only polls")
	}
	if o.listenDatabaseURL != "" && relay.Path(o.path) == relay.PathWAL {
		return errors.New("--listen-database-url is for the fast path; the wal path streams (see --replication-url)")
	}
	if o.replicationURL != "" && relay.Path(o.path) != relay.PathWAL {
		return errors.New("--replication-url is for the wal path (--path wal)")
	}
	logger, wmLogger, err := newLoggers(w, o.logLevel, o.logFormat, redact)
	if err != nil {
		return err
	}
	// The relay's live heap is small and bounded by --batch-size; a
	// rarer GC costs some 20 MB and saves about a sixth of its CPU
	// per event (bench). GOGC set in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// With large payloads the live heap is a few copies of
	// --max-bytes-in-flight (the rows held, and the broker client's
	// copies of those being published): a soft limit above that
	// keeps the rarer GC from letting garbage pile up to several
	// times it. GOMEMLIMIT set in the environment wins.
	if os.Getenv("GOMEMLIMIT") == "" && fast.MaxBytesInFlight > 0 {
		debug.SetMemoryLimit(min(3*fast.MaxBytesInFlight, 1<<62) + 64<<20)
	}
	db, err := openDB(o.databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if o.listenDatabaseURL != "" {
		listen, err := openDB(o.listenDatabaseURL)
		if err != nil {
			return fmt.Errorf("--listen-database-url: %w", err)
		}
		defer listen.Close()
		fast.ListenDB = listen
	}
	b, err := broker.Open(ctx, o.brokerURL, broker.Options{Logger: wmLogger})
	if err != nil {
		return err
	}
	defer b.Close()

	cfg.DB, cfg.Publisher, cfg.Table, cfg.Path, cfg.Logger = db, b.Publisher(), o.table, relay.Path(o.path), wmLogger
	cfg.MessagingSystem = broker.MessagingSystem(b.Scheme()) // the spans' messaging.system
	if o.cloudEventsSource != "" {
		cfg.CloudEvents = &relay.CloudEvents{Source: o.cloudEventsSource, DataSchemaBase: o.cloudEventsDataSchemaBase}
	}
	switch cfg.Path {
	case relay.PathCompatible:
		cfg.Compatible.BatchSize, cfg.Compatible.PollInterval, cfg.Compatible.RetryInterval = o.batchSize, o.pollInterval, o.retryInterval
	case relay.PathWAL:
		// The shared flags mean the same on the WAL path: rows held at
		// once, bytes held, publishes in flight, attempts, first retry.
		w := &cfg.WAL
		w.ReplicationURL, w.MaxRowsInFlight, w.MaxBytesInFlight = o.replicationURL, o.batchSize, fast.MaxBytesInFlight
		w.Concurrency, w.MaxAttempts, w.InitialBackoff = cfg.Fast.Concurrency, fast.MaxAttempts, o.retryInterval
	default:
		fast.BatchSize, fast.PollInterval, fast.InitialBackoff = o.batchSize, o.pollInterval, o.retryInterval
	}
	var reg *prometheus.Registry
	if o.metricsAddr != "" {
		reg = prometheus.NewRegistry()
		if cfg.Metrics, err = newMetrics(reg, db, o.table, cfg.DeadLetterTable); err != nil {
			return err
		}
	}
	r, err := relay.New(cfg)
	if err != nil {
		return err
	}
	if reg != nil {
		ops, err := startOpsServer(o.metricsAddr, reg, r.Ready, logger, redact, o.pprof)
		if err != nil {
			return err
		}
		defer ops.close()
		ops.setAlive(true)
		defer ops.setAlive(false)
	}
	started := []any{"broker", redact.String(o.brokerURL), "database", redact.String(o.databaseURL), "path", o.path}
	if o.listenDatabaseURL != "" {
		started = append(started, "listen_database", redact.String(o.listenDatabaseURL))
	}
	logger.Info("Relay started", started...)
	if err := r.Run(ctx); err != nil {
		return err
	}
	logger.Info("Relay stopped")
	return nil
}

// newMetrics registers on reg the Go runtime's and the process's
// collectors and the library's metrics, whose backlog gauges sample db.
func newMetrics(reg *prometheus.Registry, db *sql.DB, table, deadLetterTable string) (*metrics.Metrics, error) {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	if err := m.WatchBacklog(db, metrics.BacklogConfig{Table: table, DeadLetterTable: deadLetterTable}); err != nil {
		return nil, err
	}
	return m, nil
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

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range byteUnits[:3] {
		if n >= u.n && n%u.n == 0 && (n/u.n < 1<<10 || u.suffix == "GiB") {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (*byteSize) Type() string { return "bytes" }
