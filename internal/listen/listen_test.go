package listen_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/listen"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// patience bounds every wait of these tests on the shared server.
const patience = 20 * time.Second

// run runs l until the test ends, and fails the test if it returns early.
func run(t *testing.T, l *listen.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// signalled waits for c.
func signalled(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(patience):
		t.Fatalf("%s was not signalled", what)
	}
}

func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// quiet requires c not to be signalled for a moment.
func quiet(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
		t.Fatalf("%s was signalled", what)
	case <-time.After(200 * time.Millisecond):
	}
}

// channels are names of the test's own.
func channels(db *pgtest.DB, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = db.Schema + "_" + n
	}
	return out
}

func notify(t *testing.T, db *sql.DB, channel, payload string) {
	t.Helper()
	_, err := db.Exec(`SELECT pg_notify($1, $2)`, channel, payload)
	require.NoError(t, err)
}

// A notification reaches the waiters of its channel, not those of the
// other, with its payload and the listening session's schema; a closed
// waiter is told nothing. Once with a connection of the pool, once with
// one of its own.
func TestANotificationReachesItsWaiter(t *testing.T) {
	t.Parallel()
	for name, own := range map[string]bool{"pool": false, "own": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			chs := channels(db, "rows", "other")
			notes := make(chan listen.Notification, 10)
			l := listen.New(listen.Config{DB: db.DB, Channels: chs, OwnConnection: own,
				OnNotify: func(n listen.Notification) { notes <- n }})
			w, closed := l.Wakeups(), l.Wakeups()
			closed.Close()
			defer w.Close()
			run(t, l)
			signalled(t, w.Missed(), "the LISTEN in place")
			require.True(t, l.Listening())

			notify(t, db.DB, chs[0], "hello")
			signalled(t, w.C(chs[0]), "the notified channel")
			quiet(t, w.C(chs[1]), "the other channel")
			quiet(t, closed.C(chs[0]), "a closed waiter")
			require.Nil(t, w.C("not_listened"))
			require.Equal(t, listen.Notification{Channel: chs[0], Payload: "hello", Schema: db.Schema}, <-notes)
		})
	}
}

// The LISTEN connection is killed, again and again: the listener says so,
// tells its waiters to look once while it cannot connect (the test holds
// the only connection of its pool), connects again when it can, within
// moments each time (a notification came on each connection: the wait is
// not one that kept doubling), and notifications reach the waiters again.
func TestAKilledConnectionIsReplacedAndWaitersLookOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	pool := pgtest.OpenDB(t, db.URL)
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(1)
	chs := channels(db, "rows")
	logs := watermill.NewCaptureLogger()
	l := listen.New(listen.Config{DB: pool, Channels: chs, Logger: logs, Lost: "lost it"})
	waits := listen.RecordWaits(l)
	w := l.Wakeups()
	defer w.Close()
	run(t, l)
	require.Eventually(t, l.Listening, patience, time.Millisecond)
	drain(w.Missed()) // told before the listener's PID shows
	const losses = 7
	for i := range losses {
		pid := l.PID()
		held := make(chan *sql.Conn)
		go func() { // waits for the listener to let go of the pool's connection
			c, err := pool.Conn(context.Background())
			assert.NoError(t, err)
			held <- c
		}()
		before := waits.Len()
		var killed bool
		require.NoError(t, db.DB.QueryRow(`SELECT pg_terminate_backend($1)`, int64(pid)).Scan(&killed))
		require.True(t, killed)
		c := <-held
		signalled(t, w.Missed(), "the loss")
		require.Zero(t, l.PID())
		require.NoError(t, c.Close())
		require.Eventually(t, func() bool { again := l.PID(); return again != 0 && again != pid },
			patience, time.Millisecond, "loss %d: not listening again", i+1)
		// A notification came on the lost connection (the one before):
		// the wait starts again from the shortest, where one that kept
		// doubling would be 3.2 s by the sixth loss.
		require.Equal(t, listen.FirstWait, waits.At(before), "loss %d: the first wait after it", i+1)
		drain(w.Missed())
		notify(t, db.DB, chs[0], "")
		signalled(t, w.C(chs[0]), "a notification after the loss")
	}
	require.Len(t, messages(logs, watermill.InfoLogLevel, "lost it"), losses)
}

// A connection that stayed up listen.Healthy, though nothing came on it,
// was a good one: after its loss the listener connects again at once,
// not after a wait that doubled with each earlier loss.
func TestAConnectionThatStayedUpResetsTheWait(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := listen.New(listen.Config{DB: db.DB, Channels: channels(db, "rows")})
	waits := listen.RecordWaits(l)
	run(t, l)
	require.Eventually(t, l.Listening, patience, time.Millisecond)
	for i := range 5 {
		time.Sleep(listen.Healthy + 200*time.Millisecond)
		pid := l.PID()
		before := waits.Len()
		_, err := db.DB.Exec(`SELECT pg_terminate_backend($1)`, int64(pid))
		require.NoError(t, err)
		require.Eventually(t, func() bool { again := l.PID(); return again != 0 && again != pid },
			patience, time.Millisecond, "loss %d: not listening again", i+1)
		// A wait that kept doubling from 100 ms would be 1.6 s by the fifth loss.
		require.Equal(t, listen.FirstWait, waits.At(before), "loss %d: the first wait after it", i+1)
	}
}

// messages are the ones logged at level that start with prefix.
func messages(logs *watermill.CaptureLoggerAdapter, level watermill.LogLevel, prefix string) []string {
	var out []string
	for _, m := range logs.Captured()[level] {
		if strings.HasPrefix(m.Msg, prefix) {
			out = append(out, m.Msg)
		}
	}
	return out
}

// The check's notification, sent through the database the rows are
// written to, arrives: it says so at debug, and reports nothing.
func TestTheCheckSeesNotificationsArrive(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	logs := watermill.NewCaptureLogger()
	l := listen.New(listen.Config{DB: db.DB, Check: db.DB, Channels: channels(db, "rows"), Logger: logs})
	run(t, l)
	require.Eventually(t, func() bool { return l.CheckResult() == listen.Arrive }, patience, 10*time.Millisecond)
	require.Len(t, messages(logs, watermill.DebugLogLevel, "Notifications arrive"), 1)
	require.Empty(t, logs.Captured()[watermill.ErrorLogLevel])
}

// The LISTEN connection reaches a database the writes' notifications do
// not reach, as one through a pooler in transaction mode does: the check
// reports it with the advice, and the listener goes on (readers poll, and
// are still told to look once after a loss).
func TestTheCheckReportsLostNotificationsAndListeningGoesOn(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	other := pgtest.OtherDatabase(t)
	logs := watermill.NewCaptureLogger()
	l := listen.New(listen.Config{DB: other, Check: db.DB, CheckAdvice: "do this", Channels: channels(db, "rows"),
		Logger: logs})
	w := l.Wakeups()
	defer w.Close()
	run(t, l)
	require.Eventually(t, func() bool { return l.CheckResult() == listen.Lost }, patience, 10*time.Millisecond)
	lost := messages(logs, watermill.ErrorLogLevel, "Notifications sent through the database do not arrive")
	require.Len(t, lost, 1)
	require.True(t, strings.HasSuffix(lost[0], ": do this"), lost[0])
	require.Empty(t, messages(logs, watermill.DebugLogLevel, "Notifications arrive"))

	signalled(t, w.Missed(), "the LISTEN in place")
	_, err := other.Exec(`SELECT pg_terminate_backend($1)`, int64(l.PID()))
	require.NoError(t, err)
	signalled(t, w.Missed(), "the loss")
	require.Eventually(t, l.Listening, patience, time.Millisecond)
}

// A database without the pgx driver cannot listen: Run says so at once.
func TestRunRefusesAnotherDriver(t *testing.T) {
	t.Parallel()
	db := sql.OpenDB(fakeConnector{})
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	require.ErrorIs(t, listen.New(listen.Config{DB: db, Channels: []string{"x"}}).Run(ctx), listen.ErrNotPgx)
}
