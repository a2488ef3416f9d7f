package main

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// statusDB is an outbox's database for the tests of status: PostgreSQL or
// MariaDB, migrated, with its URL for the command and an ent client.
type statusDB struct {
	DB     *sql.DB
	URL    string
	client *ent.Client
	mysql  bool
}

// onStatusDatabases runs test on a PostgreSQL schema and on a MariaDB
// database of its own, from the same code.
func onStatusDatabases(t *testing.T, test func(t *testing.T, db statusDB)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db, client := letterDB(t)
		test(t, statusDB{DB: db.DB, URL: db.URL, client: client})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		db, url := mysqltest.Open(t)
		app := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))
		require.NoError(t, app.Schema.Create(context.Background()))
		test(t, statusDB{DB: db, URL: url, client: ent.NewClient(ent.Driver(entsql.OpenDB(dialect.MySQL, db))), mysql: true})
	})
}

// now is the database's clock in SQL, as the outbox writes it.
func (d statusDB) now() string {
	if d.mysql {
		return "UTC_TIMESTAMP(6)"
	}
	return "now()"
}

// at is the database's time shifted by offset (negative: ago), in SQL.
func (d statusDB) at(offset time.Duration) string { return mysqltest.ClockAt(d.mysql, offset) }

// exec runs query, its parameters written $1, $2… as on PostgreSQL.
func (d statusDB) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	query, args = mysqltest.Rebind(d.mysql, query, args)
	_, err := d.DB.Exec(query, args...)
	require.NoError(t, err, query)
}

// emitDated writes an aggregate's events of topic as Emit leaves them,
// numbered, its counter at the last, the k-th written ages[k] ago.
func (d statusDB) emitDated(t *testing.T, topic, aggregateID string, ages ...time.Duration) {
	t.Helper()
	d.exec(t, `INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq) VALUES ($1, 'Order', $2, $3)`,
		topic, aggregateID, len(ages))
	for i, age := range ages {
		d.exec(t, `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
			aggregate_seq, created_at) VALUES ($1, 'order.paid', 2, $2, 'Order', $3, '{}', $4, `+d.at(-age)+`)`,
			uuid.NewString(), topic, aggregateID, i+1)
	}
}

// pending writes n undelivered rows of topic, one aggregate each, written
// age ago, their last error lastError ("" for none).
func (d statusDB) pending(t *testing.T, topic string, n int, age time.Duration, lastError string) {
	t.Helper()
	var last any
	if lastError != "" {
		last = lastError
	}
	for i := range n {
		d.exec(t, `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
			attempts, last_error, created_at) VALUES ($1, 'order.paid', 2, $2, 'Order', $3, '{}', 1, $4, `+d.at(-age)+`)`,
			uuid.NewString(), topic, fmt.Sprint(i+1), last)
	}
}

// position writes consumer's position on aggregate Order/id of topic, at
// seq, held behind event held (uuid.Nil: not held) since heldFor.
func (d statusDB) position(t *testing.T, consumer, topic, id string, seq int64, held uuid.UUID, heldFor time.Duration) {
	t.Helper()
	if held == uuid.Nil {
		d.exec(t, `INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
			VALUES ($1, $2, 'Order', $3, $4, `+d.now()+`)`, consumer, topic, id, seq)
		return
	}
	d.exec(t, `INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq,
		held_seq, held_event_id, held_at, updated_at) VALUES ($1, $2, 'Order', $3, $4, $5, $6, `+d.at(-heldFor)+`, `+d.now()+`)`,
		consumer, topic, id, seq, seq+1, held.String())
}

// leasePartition makes the outbox's relays share one partition, held by
// relay until for, as a relay leases it: a fast relay on PostgreSQL, a
// poll relay on MySQL.
func (d statusDB) leasePartition(t *testing.T, relay string, until time.Duration) {
	t.Helper()
	if d.mysql {
		d.exec(t, "CREATE TABLE outbox_events_relay_lease (id INT PRIMARY KEY, holder VARCHAR(255) NOT NULL, `until` DATETIME(6) NOT NULL)")
		d.exec(t, "INSERT INTO outbox_events_relay_lease (id, holder, `until`) VALUES (0, $1, "+d.at(until)+")", relay)
		return
	}
	d.exec(t, `CREATE TABLE outbox_events_partitions (topic text NOT NULL, partition int NOT NULL, relay text NOT NULL DEFAULT '',
		until timestamptz NOT NULL DEFAULT '-infinity', PRIMARY KEY (topic, partition))`)
	d.exec(t, `CREATE TABLE outbox_events_relays (topic text NOT NULL, relay text NOT NULL, until timestamptz NOT NULL,
		live_lock boolean NOT NULL DEFAULT false, PRIMARY KEY (topic, relay))`)
	d.exec(t, `INSERT INTO outbox_events_partitions (topic, partition, relay, until) VALUES ('', 0, $1, `+d.at(until)+`)`, relay)
	d.exec(t, `INSERT INTO outbox_events_relays (topic, relay, until) VALUES ('', $1, `+d.at(until)+`)`, relay)
}
