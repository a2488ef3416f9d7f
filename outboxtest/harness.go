package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/schema"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/relay"
)

// DefaultURL is the PostgreSQL server New uses when DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DefaultTimeout is how long Wait waits for the events to settle, unless
// WithTimeout says otherwise: a bound for a stuck test, not a speed claim.
const DefaultTimeout = time.Minute

// Harness runs one test's events end to end: a PostgreSQL schema of the
// test's own, the relay in-process on an in-memory broker of its own, and
// the test's generated handlers consuming from it. Everything it made is
// stopped and dropped when the test ends, so tests using it run in
// parallel and leave nothing behind. Build one per test with New.
type Harness struct {
	// DB is a pool working in the test's schema: build the ent client on
	// it (Driver does) and migrate it (Migrate). The harness closes it when
	// the test ends; closing it earlier stops the handlers' work.
	DB *sql.DB
	// Schema is the name of the test's schema; URL connects to the
	// database with Schema as its search_path, for a pool of your own.
	Schema, URL string

	t       testing.TB
	timeout time.Duration
	prefix  string  // the relay's topic prefix (WithTopicPrefix)
	db      *sql.DB // the relay's and Wait's own, which the test's client does not close
	log     *testLog
	logger  watermill.LoggerAdapter // on log: the relay's, from info
	quiet   watermill.LoggerAdapter // on log: the router's and the broker's, from warn

	// Set by Start.
	scheduled bool // the schema has the scheduled events' table
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

// New creates a schema for t on the PostgreSQL server at DATABASE_URL
// (DefaultURL when unset) and drops it, with everything in it, when t
// ends. Without a server to reach, it skips t, saying why; under CI=true
// it fails t instead. A server that answers but refuses the connection
// (no such database, a wrong password) fails t: a skip would hide it.
func New(t testing.TB, opts ...Option) *Harness {
	t.Helper()
	serverURL := os.Getenv("DATABASE_URL")
	if serverURL == "" {
		serverURL = DefaultURL
	}
	// A server at its max_connections is waited for (pgschema.ConnectWait);
	// one that is not there answers at once.
	ctx, cancel := context.WithTimeout(context.Background(), pgschema.ConnectWait+10*time.Second)
	defer cancel()
	if err := pgschema.Ping(ctx, serverURL); err != nil {
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
			// The server is there and refused: no database of that name,
			// a password it does not take. A skip would hide that the
			// test never ran.
			t.Fatalf("outboxtest: PostgreSQL at %s answered: %v; set DATABASE_URL to a database that exists, "+
				"e.g. the server's postgres database: postgres://USER@HOST:5432/postgres", broker.Redacted(serverURL), err)
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("outboxtest: PostgreSQL at %s is not reachable (%v); under CI=true that fails the test",
				broker.Redacted(serverURL), err)
		}
		t.Skipf("outboxtest: skipping: PostgreSQL at %s is not reachable (%v); set DATABASE_URL to a server's URL, "+
			"or CI=true to fail instead", broker.Redacted(serverURL), err)
	}
	s, err := pgschema.Create(ctx, serverURL, pgschema.Name("outboxtest_", t.Name()))
	if err != nil {
		t.Fatalf("outboxtest: %v on %s", err, broker.Redacted(serverURL))
	}
	h := &Harness{DB: s.DB, Schema: s.Name, URL: s.URL, t: t, timeout: DefaultTimeout,
		subscribed: map[string]map[string]bool{}, received: map[delivery]int{}, acked: map[delivery]bool{}}
	for _, opt := range opts {
		opt(h)
	}
	h.db, err = pgschema.Open(s.URL)
	if err != nil {
		t.Fatalf("outboxtest: opening %s: %v", broker.Redacted(s.URL), err)
	}
	h.log = &testLog{t: t}
	h.logger = watermill.NewSlogLogger(slog.New(slog.NewTextHandler(h.log, nil)))
	h.quiet = watermill.NewSlogLogger(slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() {
		h.db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Logf("outboxtest: %v", err)
		}
	})
	return h
}

// Driver is an ent driver on DB: ent.NewClient(ent.Driver(h.Driver())).
func (h *Harness) Driver() *entsql.Driver { return entsql.OpenDB(dialect.Postgres, h.DB) }

// migrateMu runs one ent migration at a time in a test binary: ent's
// migration writes package state, and two at once crash the binary with a
// concurrent map write.
var migrateMu sync.Mutex

// Migrate runs the ent migration on the test's schema: pass the client's
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
	if err := tables.Check(ctx, h.db); err != nil {
		cancel()
		h.t.Fatalf("outboxtest: Start before the migration: %v; in a test, h.Migrate(client.Schema.Create) runs it", err)
	}
	var err error
	if h.scheduled, err = outboxdb.TableExists(ctx, h.db, tables.Scheduled); err != nil {
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
		PollInterval: 50 * time.Millisecond, Logger: h.logger})
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
