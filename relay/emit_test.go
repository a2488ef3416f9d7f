package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/sqlitetest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

type emitBundle struct {
	db     *pgtest.DB // on PostgreSQL
	sql    *sql.DB    // the database, whichever it is
	url    string     // its URL, for commands
	client *testent.Client
	// oneWriter is set where one transaction writes at a time (SQLite):
	// writers of different aggregates wait for each other too.
	oneWriter bool
	mysql     bool // on MariaDB (or MySQL)
}

// rebind is query, written with PostgreSQL's $1, $2 (which SQLite reads
// too), with MySQL's ? on MySQL: each parameter used once, in order.
func (b *emitBundle) rebind(query string) string {
	if !b.mysql {
		return query
	}
	return regexp.MustCompile(`\$\d+`).ReplaceAllString(query, "?")
}

func setupEmit(t *testing.T) *emitBundle {
	t.Helper()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	return &emitBundle{db: db, sql: db.DB, url: db.URL, client: client}
}

// setupEmitSQLite is setupEmit on a SQLite file of t's own.
func setupEmitSQLite(t *testing.T) *emitBundle {
	t.Helper()
	db, url := sqlitetest.Open(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.SQLite, db)))
	require.NoError(t, client.Schema.Create(context.Background()))
	return &emitBundle{sql: db, url: url, client: client, oneWriter: true}
}

// setupEmitMySQL is setupEmit on a MariaDB (or MySQL) database of t's own.
func setupEmitMySQL(t *testing.T) *emitBundle {
	t.Helper()
	db, url := mysqltest.Open(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))
	require.NoError(t, client.Schema.Create(context.Background()))
	return &emitBundle{sql: db, url: url, client: client, mysql: true}
}

// onEveryDatabase runs test on each database Emit writes to, as
// subtests in parallel: the same guarantees, from the same test code.
func onEveryDatabase(t *testing.T, test func(t *testing.T, b *emitBundle)) {
	for name, setup := range map[string]func(*testing.T) *emitBundle{
		"PostgreSQL": setupEmit, "MariaDB": setupEmitMySQL, "SQLite": setupEmitSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t))
		})
	}
}

// outboxRow is a row as stored, read with plain SQL.
type outboxRow struct {
	EventID       uuid.UUID
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       map[string]any
	Headers       map[string]string
	HasTxID       bool
	Delivered     bool
}

func (b *emitBundle) rows(t *testing.T) []outboxRow {
	t.Helper()
	rs, err := b.db.DB.Query(`SELECT event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
		payload, headers, transaction_id IS NOT NULL, delivered_at IS NOT NULL FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	defer rs.Close()
	var out []outboxRow
	for rs.Next() {
		var (
			r                outboxRow
			payload, headers []byte
		)
		require.NoError(t, rs.Scan(&r.EventID, &r.Name, &r.Version, &r.Topic, &r.AggregateType, &r.AggregateID,
			&payload, &headers, &r.HasTxID, &r.Delivered))
		require.NoError(t, json.Unmarshal(payload, &r.Payload))
		if headers != nil {
			require.NoError(t, json.Unmarshal(headers, &r.Headers))
		}
		out = append(out, r)
	}
	require.NoError(t, rs.Err())
	return out
}

func TestEmitCommitWritesTheRow(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	id := uuid.MustParse("0190d3a8-0000-7000-8000-000000000001")

	err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(4200).Save(ctx)
		if err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, fmt.Sprint(o.ID), testent.OrderPaid{OrderID: o.ID, AmountCents: 4200},
			events.WithEventID(id), events.WithHeader("correlation_id", "req-7"),
			events.WithHeaders(map[string]string{"traceparent": "00-abc-def-01"}))
	})
	require.NoError(t, err)

	rows := b.rows(t)
	require.Len(t, rows, 1)
	require.Equal(t, outboxRow{
		EventID: id, Name: "order.paid", Version: 2, Topic: "orders", AggregateType: "Order", AggregateID: "1",
		Payload: map[string]any{"order_id": float64(1), "amount_cents": float64(4200), "currency": "EUR"},
		Headers: map[string]string{"correlation_id": "req-7", "traceparent": "00-abc-def-01"},
		HasTxID: true,
	}, rows[0])

	// The payload is queryable JSONB.
	var currency string
	require.NoError(t, b.db.DB.QueryRow(`SELECT payload->>'currency' FROM outbox_events WHERE payload @> '{"order_id": 1}'`).Scan(&currency))
	require.Equal(t, "EUR", currency)
}

func TestEmitEveryKindRoundTrips(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	deleted := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	in := testent.ProfileUpdated{
		DisplayName: "Ada", Verified: true, Score: -3, Balance: 12.5,
		UpdatedAt: time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC), DeletedAt: &deleted,
		SessionID: uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), Plan: "pro",
		Avatar: []byte{0, 1, 2}, Settings: json.RawMessage(`{"dark":true}`), Tags: []string{"a", "b"},
	}
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitProfileUpdated(ctx, "p1", in)
	}))
	stored, err := b.client.Outbox.Query().Only(ctx)
	require.NoError(t, err)
	var out testent.ProfileUpdated
	require.NoError(t, json.Unmarshal(stored.Payload, &out))
	require.Equal(t, in.UpdatedAt, out.UpdatedAt)
	require.JSONEq(t, `{"dark":true}`, string(out.Settings))
	out.Settings = in.Settings
	out.UpdatedAt = in.UpdatedAt
	require.Equal(t, in, out)
	require.NotContains(t, string(stored.Payload), "nickname", "an empty optional field is left out")
}

func TestEmitRollbackLeavesNoRow(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	boom := errors.New("payment declined")
	err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("bob").SetAmountCents(100).Save(ctx)
		if err != nil {
			return err
		}
		if err := tx.Outbox.EmitOrderPaid(ctx, fmt.Sprint(o.ID), testent.OrderPaid{OrderID: o.ID, AmountCents: 100}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, b.rows(t))
	require.Zero(t, b.client.Order.Query().CountX(ctx))
}

func TestEmitConcurrentTransactions(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	const workers, perWorker = 8, 40
	var (
		mu        sync.Mutex
		committed = map[uuid.UUID]bool{}
		wg        sync.WaitGroup
		errRoll   = errors.New("rolled back on purpose")
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				id := uuid.New()
				rollback := i%4 == 3
				err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
					// Several emits in one transaction are fine.
					for k := range 2 {
						eid := id
						if k == 1 {
							eid = uuid.NewSHA1(id, []byte("second"))
						}
						if err := tx.Outbox.EmitOrderPaid(ctx, fmt.Sprintf("w%d-%d", w, i),
							testent.OrderPaid{OrderID: int64(i + 1), AmountCents: 1}, events.WithEventID(eid)); err != nil {
							return err
						}
					}
					if rollback {
						return errRoll
					}
					return nil
				})
				if rollback {
					require.ErrorIs(t, err, errRoll)
					continue
				}
				require.NoError(t, err)
				mu.Lock()
				committed[id] = true
				committed[uuid.NewSHA1(id, []byte("second"))] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	rows := b.rows(t)
	seen := map[uuid.UUID]int{}
	for _, r := range rows {
		seen[r.EventID]++
	}
	require.Len(t, committed, workers*perWorker*3/4*2)
	require.Len(t, rows, len(committed), "every committed event once, nothing from rolled-back transactions")
	for id := range committed {
		require.Equal(t, 1, seen[id], "event %s", id)
	}
}

func TestEmitOutsideTransactionIsRefused(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	err := b.client.Outbox.EmitOrderPaid(context.Background(), "1", testent.OrderPaid{OrderID: 1, AmountCents: 1})
	require.ErrorIs(t, err, events.ErrNotInTransaction)
	require.Empty(t, b.rows(t))
}

func TestEmitInvalidPayloadDoesNotPoisonTheTransaction(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)

	err = tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5, Currency: "JPY"})
	var verr *events.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "currency", verr.Field)
	require.EqualError(t, err, `events: invalid "order.paid" v2 payload: field "currency" value "JPY" is not one of [EUR USD]`)

	err = tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: -5})
	require.EqualError(t, err, `events: invalid "order.paid" v2 payload: field "amount_cents" value -5 is not positive`)

	err = tx.Outbox.EmitProfileUpdated(ctx, "p", testent.ProfileUpdated{DisplayName: "x", Plan: "free", UpdatedAt: time.Now(), SessionID: uuid.New()})
	require.EqualError(t, err, `events: invalid "profile.updated" v1 payload: field "settings" is required`)

	err = tx.Outbox.EmitOrderPaid(ctx, "", testent.OrderPaid{OrderID: 1, AmountCents: 5})
	require.EqualError(t, err, `events: invalid "order.paid" v2 event: aggregate id is empty`)

	err = tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithHeader("outbox_event_name", "x"))
	require.EqualError(t, err, `events: invalid "order.paid" v2 event: header "outbox_event_name": key uses the reserved prefix "outbox_"`)

	// The transaction is still usable.
	_, err = tx.Order.Create().SetCustomer("eve").SetAmountCents(5).Save(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}))
	require.NoError(t, tx.Commit())
	require.Len(t, b.rows(t), 1)
}

func TestEmitDuplicateEventID(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	id := uuid.New()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithEventID(id))
	}))
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	err = tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithEventID(id))
	require.ErrorIs(t, err, events.ErrDuplicateEventID)
	// The duplicate did not abort the transaction.
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "2", testent.OrderPaid{OrderID: 2, AmountCents: 5}))
	require.NoError(t, tx.Commit())
	require.Len(t, b.rows(t), 2)
}
