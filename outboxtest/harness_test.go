package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/scheduledevent"
	"github.com/entoutbox/entoutbox/outboxtest"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// harnessTB is a testing.TB whose Fatalf and Skipf, inside fails, record
// the message and stop the goroutine, as the real ones do; outside, they
// are the test's.
type harnessTB struct {
	testing.TB
	mu        sync.Mutex
	capturing bool
	failure   string
}

func (r *harnessTB) Helper() {}

func (r *harnessTB) Fatalf(format string, args ...any) { r.stop("", format, args...) }

func (r *harnessTB) Skipf(format string, args ...any) { r.stop("SKIP: ", format, args...) }

func (r *harnessTB) stop(prefix, format string, args ...any) {
	r.mu.Lock()
	capturing := r.capturing
	if capturing {
		r.failure = prefix + fmt.Sprintf(format, args...)
	}
	r.mu.Unlock()
	if !capturing {
		r.TB.Helper()
		r.TB.Fatalf(prefix+format, args...)
	}
	runtime.Goexit()
}

// fails runs fn and returns what it failed or skipped with; "" when it
// returned.
func (r *harnessTB) fails(fn func()) string {
	r.mu.Lock()
	r.capturing, r.failure = true, ""
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	r.capturing = false
	return r.failure
}

// databaseNow is the time by the clock of h's database, which decides
// when a scheduled event is due.
func databaseNow(ctx context.Context, h *outboxtest.Harness) (time.Time, error) {
	var now time.Time
	switch h.Driver().Dialect() {
	case dialect.SQLite:
		var text string
		if err := h.DB.QueryRowContext(ctx, `SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')`).Scan(&text); err != nil {
			return now, err
		}
		return time.Parse("2006-01-02 15:04:05.000", text)
	case dialect.MySQL:
		return now, h.DB.QueryRowContext(ctx, `SELECT UTC_TIMESTAMP(6)`).Scan(&now)
	}
	return now, h.DB.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&now)
}

// onEachDatabase runs test on each database the harness runs on, from the
// same code: PostgreSQL (DATABASE_URL), MariaDB (a mysql:// URL) and
// SQLite. on is the option of New that picks the database.
func onEachDatabase(t *testing.T, test func(t *testing.T, on outboxtest.Option)) {
	for _, db := range []struct {
		name string
		on   func() outboxtest.Option
	}{
		{"PostgreSQL", func() outboxtest.Option { return outboxtest.WithDatabaseURL(pgtest.ServerURL()) }},
		{"MariaDB", func() outboxtest.Option { return outboxtest.WithDatabaseURL(mysqltest.ServerURL()) }},
		{"SQLite", outboxtest.OnSQLite},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			test(t, db.on())
		})
	}
}

// setup is a harness on a migrated database with a client on it.
func setup(t testing.TB, opts ...outboxtest.Option) (*outboxtest.Harness, *testent.Client) {
	h := outboxtest.New(t, opts...)
	client := testent.NewClient(testent.Driver(h.Driver()))
	h.Migrate(client.Schema.Create)
	return h, client
}

// invoice is a handler writing the invoice of an order.
func invoice(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
	return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
		SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
}

// pay commits an order and its OrderPaid.
func pay(t testing.TB, client *testent.Client, amount int64) int64 {
	t.Helper()
	ctx := context.Background()
	var id int64
	err := client.WithTx(ctx, func(tx *testent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(amount).Save(ctx)
		if err != nil {
			return err
		}
		id = o.ID
		return tx.Outbox.EmitOrderPaid(ctx, o.ID, testent.OrderPaid{OrderID: o.ID, AmountCents: amount})
	})
	require.NoError(t, err)
	return id
}

func TestHarnessHandlesEventsEndToEnd(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		h, client := setup(t, on)
		handlers := testent.NewOutboxHandlers(client)
		handlers.OnOrderPaid("billing", invoice)
		// A handler that emits: the event it emits is waited for too.
		handlers.OnOrderPaid("pricing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			return tx.Outbox.EmitPriceChanged(ctx, "tea", testent.PriceChanged{Sku: "tea", Amount: float64(e.AmountCents) / 100})
		})
		var seen []float64
		var mu sync.Mutex
		handlers.OnPriceChanged("catalog", func(ctx context.Context, tx *testent.Tx, e *testent.PriceChanged, m events.Meta) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, e.Amount)
			return nil
		})
		h.Start(handlers)

		first := pay(t, client, 4200)
		second := pay(t, client, 1300)
		outcomes := h.RequireHandled()

		ctx := context.Background()
		invoices := client.Invoice.Query().AllX(ctx)
		require.Len(t, invoices, 2)
		require.ElementsMatch(t, []int64{first, second}, []int64{invoices[0].OrderID, invoices[1].OrderID})
		mu.Lock()
		require.ElementsMatch(t, []float64{42, 13}, seen)
		mu.Unlock()

		var got []string
		for _, o := range outcomes {
			require.True(t, o.Handled, o.String())
			require.Empty(t, o.DeadLetter)
			require.Equal(t, 1, o.Attempts)
			require.NotZero(t, o.EventID)
			got = append(got, o.Consumer+" "+o.Event+" "+o.AggregateID)
		}
		// Each event by consumer name, in the order written; the events the
		// pricing handler emits come after both payments.
		require.Equal(t, []string{
			"billing order.paid " + strconv.FormatInt(first, 10), "pricing order.paid " + strconv.FormatInt(first, 10),
			"billing order.paid " + strconv.FormatInt(second, 10), "pricing order.paid " + strconv.FormatInt(second, 10),
			"catalog price.changed tea", "catalog price.changed tea",
		}, got)
	})
}

func TestHarnessReportsDeadLetters(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		r := &harnessTB{TB: t}
		h, client := setup(r, on)
		handlers := testent.NewOutboxHandlers(client, consumer.WithMaxAttempts(2), consumer.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
		handlers.OnOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error {
			return errors.New("card processor down")
		})
		h.Start(handlers)
		id := pay(t, client, 4200)

		letters := h.RequireDeadLettered()
		require.Len(t, letters, 1)
		l := letters[0]
		require.Equal(t, "billing", l.Consumer)
		require.Equal(t, "order.paid", l.Event)
		require.Equal(t, strconv.FormatInt(id, 10), l.AggregateID)
		require.False(t, l.Handled)
		require.Equal(t, "card processor down", l.DeadLetter)
		require.Equal(t, 2, l.Attempts)

		require.Equal(t, fmt.Sprintf("outboxtest: 1 of 1 events went to the dead letters:\n"+
			"\torder.paid %s (aggregate %d): \"billing\" dead-lettered it after 2 attempts: card processor down", l.EventID, id),
			r.fails(func() { h.RequireHandled() }))
	})
}

// An event the relay gave up publishing is settled, as the relay's dead
// letter; a retried one is still told by its id.
func TestHarnessReportsTheRelaysDeadLetters(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		h, client := setup(t, on)
		h.Start()
		ids := []uuid.UUID{uuid.New(), uuid.New()}
		ctx := context.Background()
		letter := func(source, aggregate, reason string, attempts int) *testent.DeadLetterCreate {
			return client.DeadLetter.Create().SetSource(source).SetEventName("order.paid").SetEventVersion(1).
				SetTopic("orders").SetAggregateType("Order").SetAggregateID(aggregate).SetReason(reason).SetAttempts(attempts)
		}
		letter("relay", "7", "broker refused it", 5).SetEventID(ids[0]).ExecX(ctx)
		letter("relay", "8", "too big", 5).SetRetriedEventID(ids[1]).ExecX(ctx)
		letter("billing", "7", "a consumer letter, not the relay's", 1).SetEventID(ids[0]).ExecX(ctx)
		letters := h.RequireDeadLettered()
		require.Len(t, letters, 2)
		for i, want := range []struct{ aggregate, reason string }{{"7", "broker refused it"}, {"8", "too big"}} {
			l := letters[i]
			require.Equal(t, outboxtest.Outcome{EventID: ids[i], Event: "order.paid", Version: 1, AggregateID: want.aggregate,
				DeadLetter: want.reason, Attempts: 5}, l)
		}
		require.Equal(t, fmt.Sprintf("order.paid %s (aggregate 7): the relay dead-lettered it after 5 attempts: broker refused it", ids[0]),
			letters[0].String())
	})
}

func TestHarnessSaysWhatWasHandledWhenNothingWasDeadLettered(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		r := &harnessTB{TB: t}
		h, client := setup(r, on)
		handlers := testent.NewOutboxHandlers(client)
		handlers.OnOrderPaid("billing", invoice)
		h.Start(handlers)
		id := pay(t, client, 4200)
		outcomes := h.RequireHandled()
		require.Len(t, outcomes, 1)
		require.Equal(t, fmt.Sprintf("outboxtest: no event went to the dead letters; 1 were handled:\n"+
			"\torder.paid %s (aggregate %d): handled by \"billing\" on attempt 1", outcomes[0].EventID, id),
			r.fails(func() { h.RequireDeadLettered() }))
	})
}

func TestHarnessTimesOutSayingWhereEachEventStands(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		r := &harnessTB{TB: t}
		// A short bound: the handler below never returns while Wait waits.
		h, client := setup(r, on, outboxtest.WithTimeout(3*time.Second))
		started, release := make(chan struct{}, 1), make(chan struct{})
		handlers := testent.NewOutboxHandlers(client)
		handlers.OnOrderPaid("billing", func(ctx context.Context, _ *testent.Tx, _ *testent.OrderPaid, _ events.Meta) error {
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		h.Start(handlers)
		t.Cleanup(func() { close(release) }) // before the harness stops
		id := pay(t, client, 4200)
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the handler was not called within a minute")
		}

		failure := r.fails(func() { h.Wait() })
		require.Regexp(t, `^outboxtest: after 3s, 1 of 1 events have not settled \(been handled or dead-lettered\):
	order.paid [0-9a-f-]{36} \(aggregate `+strconv.FormatInt(id, 10)+`\): published; "billing" received it once and has not finished it$`, failure)
	})
}

func TestHarnessSaysWhyNothingWasHandled(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		r := &harnessTB{TB: t}
		h, client := setup(r, on)
		handlers := testent.NewOutboxHandlers(client, consumer.WithTopicPrefix("prod."))
		handlers.OnOrderPaid("billing", invoice)
		h.Start(handlers)

		require.Equal(t, "outboxtest: no event was handled: no event was committed to the outbox (did the transaction commit?)",
			r.fails(func() { h.RequireHandled() }))

		pay(t, client, 4200)
		require.Equal(t, `outboxtest: no event was handled: events published: 1 to "orders"; topics read: "prod.orders" by billing; `+
			`the handlers of a consumer reading the topic must be registered for the event, without a topic prefix `+
			`(or give the harness theirs: WithTopicPrefix)`,
			r.fails(func() { h.RequireHandled() }))
		require.Empty(t, h.Wait(), "an event no consumer reads has no outcome")
	})
}

// Handlers built with a topic prefix, as the application wires them, are
// tested with the harness given the same prefix: the relay publishes
// under it. Given another, the failure names both.
func TestHarnessWithTheHandlersTopicPrefix(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		h, client := setup(t, on, outboxtest.WithTopicPrefix("prod."))
		handlers := testent.NewOutboxHandlers(client, consumer.WithTopicPrefix("prod."))
		handlers.OnOrderPaid("billing", invoice)
		h.Start(handlers)
		pay(t, client, 4200)
		outcomes := h.RequireHandled()
		require.Len(t, outcomes, 1)
		require.Equal(t, "billing", outcomes[0].Consumer)
		require.Equal(t, 1, client.Invoice.Query().CountX(context.Background()))

		r := &harnessTB{TB: t}
		h, client = setup(r, on, outboxtest.WithTopicPrefix("staging."))
		handlers = testent.NewOutboxHandlers(client, consumer.WithTopicPrefix("prod."))
		handlers.OnOrderPaid("billing", invoice)
		h.Start(handlers)
		pay(t, client, 4200)
		require.Equal(t, `outboxtest: no event was handled: events published: 1 to "staging.orders"; topics read: "prod.orders" by billing; `+
			`the handlers of a consumer reading the topic must be registered for the event, with the harness's topic prefix "staging."`,
			r.fails(func() { h.RequireHandled() }))
	})
}

func TestHarnessNeedsStartAndTheMigration(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		r := &harnessTB{TB: t}
		h := outboxtest.New(r, on)
		require.Equal(t, "outboxtest: Wait before Start: nothing relays or handles the events", r.fails(func() { h.Wait() }))
		require.Equal(t, `outboxtest: Start before the migration: table "outbox_events" does not exist `+
			`(run the ent migration first: client.Schema.Create); in a test, h.Migrate(client.Schema.Create) runs it`,
			r.fails(func() { h.Start() }))

		client := testent.NewClient(testent.Driver(h.Driver()))
		h.Migrate(client.Schema.Create)
		h.Start()
		require.Equal(t, "outboxtest: Start was called twice; pass every handler set to one Start", r.fails(func() { h.Start() }))
	})
}

// The harnesses of parallel tests do not see each other's events, and
// each drops its database when its test ends.
func TestHarnessesAreIsolatedAndLeaveNothing(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		var mu sync.Mutex
		var made []*outboxtest.Harness
		t.Run("group", func(t *testing.T) {
			for i := range 3 {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					t.Parallel()
					h, client := setup(t, on)
					mu.Lock()
					made = append(made, h)
					mu.Unlock()
					handlers := testent.NewOutboxHandlers(client)
					handlers.OnOrderPaid("billing", invoice)
					h.Start(handlers)
					for range i + 1 {
						pay(t, client, 100)
					}
					require.Len(t, h.RequireHandled(), i+1)
					require.Equal(t, i+1, client.Invoice.Query().CountX(context.Background()))
				})
			}
		})
		require.Len(t, made, 3)
		require.Empty(t, leftBehind(t, made), "databases left behind")
	})
}

// leftBehind is those of the harnesses' databases that still exist.
func leftBehind(t *testing.T, harnesses []*outboxtest.Harness) []string {
	var left []string
	for _, h := range harnesses {
		var exists bool
		switch h.Driver().Dialect() {
		case dialect.SQLite:
			_, err := os.Stat(sqlitedb.Path(h.URL))
			require.True(t, err == nil || errors.Is(err, fs.ErrNotExist), "%v", err)
			exists = err == nil
		case dialect.MySQL:
			require.True(t, strings.HasPrefix(h.Schema, "outboxtest_testharnessesareisolated"), h.Schema)
			admin, _ := mysqltest.Open(t) // the server, by a database of the check's own
			require.NoError(t, admin.QueryRow(`SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = ?)`,
				h.Schema).Scan(&exists))
		default:
			require.True(t, strings.HasPrefix(h.Schema, "outboxtest_testharnessesareisolated"), h.Schema)
			require.NoError(t, pgtest.New(t).DB.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`,
				h.Schema).Scan(&exists))
		}
		if exists {
			left = append(left, h.URL)
		}
	}
	return left
}

// Without a server, New skips the test, saying how to give one; under
// CI=true it fails it.
func TestHarnessWithoutAServer(t *testing.T) {
	for _, server := range []struct{ name, url string }{
		{"PostgreSQL", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"},
		{"MySQL", "mysql://root@127.0.0.1:1/test?timeout=5s"},
	} {
		t.Run(server.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", server.url)
			quoted := regexp.QuoteMeta(server.url)
			r := &harnessTB{TB: t}
			t.Setenv("CI", "")
			skipped := r.fails(func() { outboxtest.New(r) })
			require.Regexp(t, `^SKIP: outboxtest: skipping: `+server.name+` at `+quoted+
				` is not reachable \(.*\); set DATABASE_URL to a server's URL, or CI=true to fail instead$`, skipped)
			t.Setenv("CI", "true")
			failed := r.fails(func() { outboxtest.New(r) })
			require.Regexp(t, `^outboxtest: `+server.name+` at `+quoted+
				` is not reachable \(.*\); under CI=true that fails the test$`, failed)
		})
	}
}

// A SQLite URL in DATABASE_URL would share one file between tests: New
// refuses it, naming the option that gives each test its own.
func TestHarnessRefusesASQLiteURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "sqlite:app.db")
	r := &harnessTB{TB: t}
	require.Equal(t, "outboxtest: sqlite:app.db is a SQLite URL; the harness makes a SQLite file of the test's own with "+
		"outboxtest.New(t, outboxtest.OnSQLite())", r.fails(func() { outboxtest.New(r) }))
}

// A server that is there without the database (a fresh server has only
// postgres) fails the test, CI or not: a skip would pass unseen.
func TestHarnessOnAServerWithoutTheDatabase(t *testing.T) {
	pgtest.New(t) // skips without a server
	u, err := url.Parse(pgtest.ServerURL())
	require.NoError(t, err)
	u.Path = "/outboxtest_no_such_database"
	t.Setenv("DATABASE_URL", u.String())
	t.Setenv("CI", "")
	r := &harnessTB{TB: t}
	failed := r.fails(func() { outboxtest.New(r) })
	require.Regexp(t, `^outboxtest: PostgreSQL at .*/outboxtest_no_such_database.* answered: .*`+
		`database "outboxtest_no_such_database" does not exist.*; set DATABASE_URL to a database that exists, `+
		`e.g. the server's postgres database: postgres://USER@HOST:5432/postgres$`, failed)

	mysqltest.Open(t) // skips without a server
	u, err = url.Parse(mysqltest.ServerURL())
	require.NoError(t, err)
	u.Path = "/outboxtest_no_such_database"
	failed = r.fails(func() { outboxtest.New(r, outboxtest.WithDatabaseURL(u.String())) })
	require.Regexp(t, `^outboxtest: MySQL at .*/outboxtest_no_such_database answered: .*`+
		`Unknown database 'outboxtest_no_such_database'; set the URL to a database that exists and that `+
		`the user may create databases beside$`, failed)
}

// TestHarnessWaitsForScheduledEventsDueBeforeItsTimeout: an event due in a
// few seconds is waited for until the relay moved it into the outbox and
// the handler got it, with the time it was due, not before; one due after
// the timeout, or cancelled, is not waited for.
func TestHarnessWaitsForScheduledEventsDueBeforeItsTimeout(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, on outboxtest.Option) {
		h, client := setup(t, on)
		var (
			mu  sync.Mutex
			got []events.Meta
		)
		handlers := testent.NewOutboxHandlers(client)
		handlers.OnPaymentReminder("mailer", func(ctx context.Context, tx *testent.Tx, e *testent.PaymentReminder, m events.Meta) error {
			now, err := databaseNow(ctx, h)
			if err != nil {
				return err
			}
			if now.Before(m.DeliverAt) {
				return fmt.Errorf("reminder %d handled at %s, before it was due at %s", e.OrderID, now, m.DeliverAt)
			}
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m)
			return nil
		})
		h.Start(handlers)

		ctx := context.Background()
		var soon, later, cancelled uuid.UUID
		require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
			if err := tx.Outbox.EmitPaymentReminder(ctx, 1, testent.PaymentReminder{OrderID: 1},
				events.DeliverAfter(2*time.Second), events.ReturnEventID(&soon)); err != nil {
				return err
			}
			if err := tx.Outbox.EmitPaymentReminder(ctx, 2, testent.PaymentReminder{OrderID: 2},
				events.DeliverAfter(24*time.Hour), events.ReturnEventID(&later)); err != nil {
				return err
			}
			return tx.Outbox.EmitPaymentReminder(ctx, 3, testent.PaymentReminder{OrderID: 3},
				events.DeliverAfter(time.Second), events.ReturnEventID(&cancelled))
		}))
		require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
			_, err := tx.Outbox.Cancel(ctx, cancelled)
			return err
		}))
		due := client.ScheduledEvent.Query().Where(scheduledevent.EventID(soon)).OnlyX(ctx).DeliverAt

		outcomes := h.RequireHandled()
		require.Len(t, outcomes, 1)
		require.Equal(t, soon, outcomes[0].EventID)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 1)
		require.True(t, due.Equal(got[0].DeliverAt), "the handler saw it due at %s, want %s", got[0].DeliverAt, due)
		require.Equal(t, 1, client.ScheduledEvent.Query().Where(scheduledevent.EventID(later)).CountX(ctx), "still waiting")
	})
}
