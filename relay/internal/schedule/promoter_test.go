package schedule_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/relay/internal/schedule"
)

// patience bounds a wait for the promoter: a liveness bound on a loaded
// machine, not a speed claim.
const patience = time.Minute

func setup(t *testing.T) *sql.DB {
	t.Helper()
	db := pgtest.New(t)
	pgtest.Migrate(t, ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
	return db.DB
}

// run runs a promoter with s until the test ends.
func run(t *testing.T, s schedule.Settings) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- schedule.New(s).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// scheduleIn writes a scheduled event due in d by the database's clock,
// and notifies the scheduled channel at commit when notify is set, as Emit
// does.
func scheduleIn(t *testing.T, db *sql.DB, d time.Duration, notify bool) {
	t.Helper()
	tx, err := db.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, deliver_at) VALUES (gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', '1', '{}',
		clock_timestamp() + $1 * interval '1 microsecond')`, d.Microseconds())
	require.NoError(t, err)
	if notify {
		_, err = tx.Exec(`SELECT pg_notify($1, '')`, outbox.ScheduledChannel("outbox_scheduled_events"))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
}

func outboxRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&n))
	return n
}

// Without the scheduled table there is nothing to promote: the promoter
// says so at info and waits for its end, without error.
func TestPromoterWithoutTheTableSaysSo(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	logs := watermill.NewCaptureLogger()
	run(t, schedule.Settings{DB: db.DB, ListenDB: db.DB, Tables: outboxdb.New("", ""), Logger: logs})
	require.Eventually(t, func() bool {
		for _, l := range logs.Captured()[watermill.InfoLogLevel] {
			if l.Msg == "Scheduled events are not promoted: the table does not exist (restart the relay after migrating "+
				"to deliver events emitted with DeliverAt or DeliverAfter)" && l.Fields["scheduled_table"] == "outbox_scheduled_events" {
				return true
			}
		}
		return false
	}, patience, 10*time.Millisecond)
}

// A promoter that waits (nothing pending: MaxSleep, a minute here) wakes on
// the notification of a newly scheduled event and moves it when due, far
// sooner than its longest wait.
func TestPromoterWakesOnNotification(t *testing.T) {
	t.Parallel()
	db := setup(t)
	run(t, schedule.Settings{DB: db, ListenDB: db, Tables: outboxdb.New("", ""), MaxSleep: 10 * time.Minute})
	time.Sleep(200 * time.Millisecond) // it has looked once, found none, and waits
	scheduleIn(t, db, 300*time.Millisecond, true)
	require.Eventually(t, func() bool { return outboxRows(t, db) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the notification did not wake the promoter")
}

// Without LISTEN (a pooler in transaction mode) the promoter looks every
// MaxSleep: an event scheduled while it waits, without notification, is
// moved at most that late.
func TestPromoterWithoutListenLooksEveryMaxSleep(t *testing.T) {
	t.Parallel()
	db := setup(t)
	run(t, schedule.Settings{DB: db, Tables: outboxdb.New("", ""), MaxSleep: 300 * time.Millisecond})
	time.Sleep(100 * time.Millisecond)
	scheduleIn(t, db, 0, false)
	require.Eventually(t, func() bool { return outboxRows(t, db) == 1 }, patience, 10*time.Millisecond)
}

// Many due at once go in bounded batches, all of them, with no waits in
// between beyond the statements.
func TestPromoterMovesAManyDueInBatches(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, err := db.Exec(`INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, deliver_at) SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', (g % 7)::text, '{}',
		clock_timestamp() - interval '1 second' FROM generate_series(1, 2500) g`)
	require.NoError(t, err)
	promoted := make(chan int, 100)
	run(t, schedule.Settings{DB: db, Tables: outboxdb.New("", ""), BatchSize: 100, MaxSleep: 10 * time.Minute,
		Metrics: schedule.Metrics{Promoted: func(n int) { promoted <- n }}})
	total := 0
	for total < 2500 {
		select {
		case n := <-promoted:
			require.LessOrEqual(t, n, 100)
			total += n
		case <-time.After(patience):
			t.Fatalf("%d of 2500 promoted", total)
		}
	}
	require.Equal(t, 2500, outboxRows(t, db))
	var gaps int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM (SELECT aggregate_seq - lag(aggregate_seq) OVER
		(PARTITION BY aggregate_id ORDER BY id) AS step FROM outbox_events) s WHERE step <> 1`).Scan(&gaps))
	require.Zero(t, gaps, "each aggregate numbered 1, 2, 3... in id order")
}

// The wait comes from the database: an event due in a second, with no
// notification and the longest wait ten minutes, is moved when due, not
// at the longest wait; and not before (it is due by the database's clock
// when the outbox row is written).
func TestPromoterWakesWhenTheNextIsDue(t *testing.T) {
	t.Parallel()
	db := setup(t)
	scheduleIn(t, db, time.Second, false)
	run(t, schedule.Settings{DB: db, Tables: outboxdb.New("", ""), MaxSleep: 10 * time.Minute})
	require.Eventually(t, func() bool { return outboxRows(t, db) == 1 }, patience, 10*time.Millisecond,
		"the promoter did not wake when the event was due")
	var early bool
	require.NoError(t, db.QueryRow(`SELECT (o.headers->>'outbox_deliver_at')::timestamptz > o.created_at + interval '1 millisecond'
		FROM outbox_events o`).Scan(&early))
	require.False(t, early, "moved before it was due")
}

// A promotion that fails is logged and tried again after a wait that
// doubles: no spin, and no end to the promoter.
func TestPromoterRetriesFailuresWithBackoff(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, err := db.Exec(`ALTER TABLE outbox_events DROP COLUMN readable_from`)
	require.NoError(t, err)
	scheduleIn(t, db, -time.Second, false)
	logs := watermill.NewCaptureLogger()
	var failed atomic.Int64
	run(t, schedule.Settings{DB: db, Tables: outboxdb.New("", ""), Logger: logs, RetryInterval: 50 * time.Millisecond,
		Metrics: schedule.Metrics{Failed: func(error) { failed.Add(1) }}})
	time.Sleep(2 * time.Second)
	// 50 ms doubling: about 6 tries in 2 s; a spin would be thousands.
	n := failed.Load()
	require.GreaterOrEqual(t, n, int64(2))
	require.LessOrEqual(t, n, int64(10))
	errs := logs.Captured()[watermill.ErrorLogLevel]
	require.NotEmpty(t, errs)
	require.Equal(t, "Could not promote the due scheduled events; retrying", errs[0].Msg)
	require.ErrorContains(t, errs[0].Err, "readable_from")
}
