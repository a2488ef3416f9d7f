package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/schema"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay"
)

// DefaultURL is the PostgreSQL server New uses when DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DefaultTimeout is how long Wait waits for the events to settle, unless
// WithTimeout says otherwise: a bound for a stuck test, not a speed claim.
const DefaultTimeout = time.Minute

// Harness runs one test's events end to end: a database of the test's
// own (a PostgreSQL schema, a MySQL database or a SQLite file), the relay
// in-process on an in-memory broker of its own, and the test's generated
// handlers consuming from it. Everything it made is stopped and dropped
// when the test ends, so tests using it run in parallel and leave nothing
// behind. Build one per test with New.
type Harness struct {
	// DB is a pool working in the test's database: build the ent client on
	// it (Driver does) and migrate it (Migrate). The harness closes it when
	// the test ends; closing it earlier stops the handlers' work.
	DB *sql.DB
	// Schema is the name of the test's schema on PostgreSQL, of its
	// database on MySQL, empty on SQLite. URL connects to it, for a pool
	// of your own: on PostgreSQL with Schema as its search_path; on MySQL
	// a mysql:// URL and on SQLite a sqlite: URL of the file (open them
	// with packages mysqldb and sqlitedb).
	Schema, URL string

	t          testing.TB
	timeout    time.Duration
	prefix     string // the relay's topic prefix (WithTopicPrefix)
	onSQLite   bool   // OnSQLite
	serverURL  string // WithDatabaseURL
	entDialect string
	tables     outboxdb.Tables // in the test's database's dialect
	db         *sql.DB         // the relay's and Wait's own, which the test's client does not close
	log        *testLog
	logger     watermill.LoggerAdapter // on log: the relay's, from info
	quiet      watermill.LoggerAdapter // on log: the router's and the broker's, from warn

	// Set by Start.
	scheduled bool // the database has the scheduled events' table
	stop      func()
	stopped   chan struct{} // closed when the relay or the router stopped
	stopErr   error         // why, read once stopped is closed

	mu         sync.Mutex
	subscribed map[string]map[string]bool // full topic → consumer names reading it
	received   map[delivery]int           // times the handlers were called
	acked      map[delivery]bool          // the handler set acknowledged it: handled, dead-lettered or not its event
}

// delivery is one event at one consumer.
type delivery struct{ consumer, eventID string }

// Option changes a Harness.
type Option func(*Harness)

// WithTimeout sets how long Wait waits for the events to settle.
func WithTimeout(d time.Duration) Option { return func(h *Harness) { h.timeout = d } }

// WithTopicPrefix has the relay publish each event to prefix + its topic,
// as the relay's --topic-prefix does: give it the prefix your handlers are
// built with (consumer.WithTopicPrefix), so that a test wires them as your
// application does.
func WithTopicPrefix(prefix string) Option { return func(h *Harness) { h.prefix = prefix } }

// OnSQLite runs the harness on a SQLite file of the test's own, in
// t.TempDir(), instead of a PostgreSQL schema: no server, and a test
// runs in a fraction of a second. The relay runs on its poll path, one
// at a time, as it does on every SQLite database (see docs/sqlite.md).
func OnSQLite() Option { return func(h *Harness) { h.onSQLite = true } }

// WithDatabaseURL has New make the test's database on the server at url
// instead of DATABASE_URL's: a schema of its own on PostgreSQL
// (postgres://), a database of its own on MySQL or MariaDB (mysql:// or
// mariadb://; the URL's user may create databases). DATABASE_URL may name
// either kind too.
func WithDatabaseURL(url string) Option { return func(h *Harness) { h.serverURL = url } }

// New makes a database of t's own and drops it, with everything in it,
// when t ends: a schema on the PostgreSQL server at DATABASE_URL
// (DefaultURL when unset), a database on a MySQL or MariaDB server when
// that URL is mysql://, a SQLite file with OnSQLite. Without a server to
// reach, it skips t, saying why; under CI=true it fails t instead. A
// server that answers but refuses the connection (no such database, a
// wrong password) fails t: a skip would hide it.
func New(t testing.TB, opts ...Option) *Harness {
	t.Helper()
	h := &Harness{t: t, timeout: DefaultTimeout,
		subscribed: map[string]map[string]bool{}, received: map[delivery]int{}, acked: map[delivery]bool{}}
	for _, opt := range opts {
		opt(h)
	}
	d := openDatabase(t, h.onSQLite, h.serverURL)
	h.DB, h.db, h.Schema, h.URL, h.entDialect = d.DB, d.db, d.name, d.url, d.entDialect
	h.tables = outboxdb.New("", "")
	h.tables.Dialect = d.dialect
	h.log = &testLog{t: t}
	h.logger = watermill.NewSlogLogger(slog.New(slog.NewTextHandler(h.log, nil)))
	h.quiet = watermill.NewSlogLogger(slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() {
		h.db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.drop(ctx); err != nil {
			t.Logf("outboxtest: %v", err)
		}
	})
	return h
}

// Driver is an ent driver on DB: ent.NewClient(ent.Driver(h.Driver())).
func (h *Harness) Driver() *entsql.Driver { return entsql.OpenDB(h.entDialect, h.DB) }

// migrateMu runs one ent migration at a time in a test binary: ent's
// migration writes package state, and two at once crash the binary with a
// concurrent map write.
var migrateMu sync.Mutex

// Migrate runs the ent migration on the test's database: pass the client's
// Schema.Create. Parallel tests may call it at once.
func (h *Harness) Migrate(create func(context.Context, ...schema.MigrateOption) error) {
	h.t.Helper()
	migrateMu.Lock()
	defer migrateMu.Unlock()
	if err := create(context.Background()); err != nil {
		h.t.Fatalf("outboxtest: ent migration: %v", err)
	}
}

// Handlers is what the generated NewOutboxHandlers returns.
type Handlers interface {
	AddToRouter(r *message.Router, newSubscriber func(consumer string) (message.Subscriber, error)) error
}

// Start runs the relay and the handlers until the test ends: the relay
// publishes the committed events to an in-memory broker of the harness's
// own, without a topic prefix unless WithTopicPrefix gives one (the
// handlers' consumer.WithTopicPrefix must be the same), and the handlers
// consume from it. Migrate first. Start only once; with no handlers, Wait
// waits for the relay alone.
func (h *Harness) Start(handlers ...Handlers) {
	h.t.Helper()
	if h.stop != nil {
		h.t.Fatalf("outboxtest: Start was called twice; pass every handler set to one Start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.tables.Check(ctx, h.db); err != nil {
		cancel()
		h.t.Fatalf("outboxtest: Start before the migration: %v; in a test, h.Migrate(client.Schema.Create) runs it", err)
	}
	var err error
	if h.scheduled, err = h.tables.TableExists(ctx, h.db, h.tables.Scheduled); err != nil {
		cancel()
		h.t.Fatalf("outboxtest: looking for the scheduled events' table: %v", err)
	}
	b, err := broker.Open(ctx, "mem://", broker.Options{Logger: h.quiet})
	if err != nil {
		cancel()
		h.t.Fatalf("outboxtest: opening the in-memory broker: %v", err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, h.quiet)
	if err != nil {
		cancel()
		b.Close()
		h.t.Fatalf("outboxtest: %v", err)
	}
	router.AddMiddleware(h.observe)
	for _, hs := range handlers {
		if err := hs.AddToRouter(router, h.subscriber(b)); err != nil {
			cancel()
			b.Close()
			h.t.Fatalf("outboxtest: adding the handlers: %v", err)
		}
	}
	r, err := relay.New(relay.Config{DB: h.db, Publisher: b.Publisher(), TopicPrefix: h.prefix,
		PollInterval: h.pollInterval(), Logger: h.logger})
	if err != nil {
		cancel()
		b.Close()
		h.t.Fatalf("outboxtest: %v", err)
	}
	h.run(ctx, cancel, b, router, r)
}

// run runs the router and the relay until the test ends, stopping both
// (cancel) and closing the broker then, and returns once the router
// runs; a stop of either before then fails the test.
func (h *Harness) run(ctx context.Context, cancel context.CancelFunc, b broker.Broker, router *message.Router, r *relay.Relay) {
	h.stopped = make(chan struct{})
	var once sync.Once
	end := func(err error) {
		once.Do(func() { h.stopErr = err; close(h.stopped) })
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := router.Run(ctx); err != nil {
			end(fmt.Errorf("the handlers' router stopped: %w", err))
		} else if ctx.Err() == nil {
			end(errors.New("the handlers' router stopped"))
		}
	}()
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			end(fmt.Errorf("the relay stopped: %w", err))
		} else if ctx.Err() == nil {
			end(errors.New("the relay stopped"))
		}
	}()
	h.stop = func() {
		cancel()
		// A router without handlers ends on Close only.
		if err := router.Close(); err != nil {
			h.t.Logf("outboxtest: closing the handlers' router: %v", err)
		}
		wg.Wait()
		if err := b.Close(); err != nil {
			h.t.Logf("outboxtest: closing the in-memory broker: %v", err)
		}
		h.log.close()
	}
	h.t.Cleanup(h.stop)
	select {
	case <-router.Running():
	case <-h.stopped:
		h.t.Fatalf("outboxtest: %v", h.stopErr)
	}
}

// subscriber hands out the broker's subscribers, noting which consumer
// reads which topic.
func (h *Harness) subscriber(b broker.Broker) func(string) (message.Subscriber, error) {
	return func(consumer string) (message.Subscriber, error) {
		sub, err := b.Subscriber(consumer)
		if err != nil {
			return nil, err
		}
		return &noting{Subscriber: sub, h: h, consumer: consumer}, nil
	}
}

type noting struct {
	message.Subscriber
	h        *Harness
	consumer string
}

func (n *noting) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	n.h.mu.Lock()
	if n.h.subscribed[topic] == nil {
		n.h.subscribed[topic] = map[string]bool{}
	}
	n.h.subscribed[topic][n.consumer] = true
	n.h.mu.Unlock()
	return n.Subscriber.Subscribe(ctx, topic)
}

// observe counts each call of a handler and notes those acknowledged.
func (h *Harness) observe(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		d := delivery{consumer: consumerOf(msg), eventID: msg.UUID}
		h.mu.Lock()
		h.received[d]++
		h.mu.Unlock()
		out, err := next(msg)
		if err == nil {
			h.mu.Lock()
			h.acked[d] = true
			h.mu.Unlock()
		}
		return out, err
	}
}

// consumerOf is the consumer name of the handler msg was given to: the
// handler set names its router handlers "<consumer>/<topic>", with "#<n>"
// after the second and later members of a consumer's group.
func consumerOf(msg *message.Message) string {
	name := message.HandlerNameFromCtx(msg.Context())
	if i := strings.LastIndex(name, "/"+message.SubscribeTopicFromCtx(msg.Context())); i >= 0 {
		return name[:i]
	}
	return name
}

// testLog writes the relay's and the router's logs, info and above, to
// the test's log until the harness stops: a log after the test ended
// would panic.
type testLog struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// pollInterval is how often the relay looks for new rows when nothing
// wakes it: on PostgreSQL a commit does (LISTEN), so it is a fallback;
// elsewhere it is the wait between a commit and its publication, and a
// look at a SQLite file of the test's own costs little.
func (h *Harness) pollInterval() time.Duration {
	if h.tables.Dialect == outboxdb.SQLite {
		return 10 * time.Millisecond
	}
	return 50 * time.Millisecond
}
