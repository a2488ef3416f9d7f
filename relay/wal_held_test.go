package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// heldRelayEnv carries, to the test binary started again as a child
// process, the settings of the WAL relay it runs (TestWALHeldRelayProcess).
const heldRelayEnv = "ENTOUTBOX_TEST_HELD_WAL_RELAY"

// heldRelay is the WAL relay a child process runs: every publish is held
// until the process is killed, so that nothing it read is ever acked.
type heldRelay struct {
	URL, Slot, Publication string
	// SenderTimeout, when set, is the server's wal_sender_timeout on the
	// replication connection: it sends keep-alives asking for a reply
	// after half of it without one.
	SenderTimeout string
	// StatusInterval is how often the relay sends its position unasked.
	StatusInterval time.Duration
}

// heldPublisher holds every publish until it is closed: a broker that
// never answers.
type heldPublisher struct{ closed chan struct{} }

func (p heldPublisher) Publish(string, ...*message.Message) error {
	<-p.closed
	return fmt.Errorf("held publisher closed")
}

func (p heldPublisher) Close() error {
	close(p.closed)
	return nil
}

// TestWALHeldRelayProcess is not a test: it is the child process
// startHeldRelay runs, a WAL relay whose publishes are held until it is
// killed.
func TestWALHeldRelayProcess(t *testing.T) {
	settings := os.Getenv(heldRelayEnv)
	if settings == "" {
		t.Skip("the child process of the tests that kill a held WAL relay")
	}
	var h heldRelay
	require.NoError(t, json.Unmarshal([]byte(settings), &h))
	db, err := sql.Open("pgx", h.URL)
	require.NoError(t, err)
	cfg := relay.Config{DB: db, Path: relay.PathWAL, Publisher: heldPublisher{closed: make(chan struct{})}}
	cfg.WAL.Slot, cfg.WAL.Publication = h.Slot, h.Publication
	cfg.WAL.StatusInterval = h.StatusInterval
	if h.SenderTimeout != "" {
		u, err := url.Parse(h.URL)
		require.NoError(t, err)
		// The driver reads a space as %20, not as "+".
		u.RawQuery += "&options=" + strings.ReplaceAll(url.QueryEscape("-c wal_sender_timeout="+h.SenderTimeout), "+", "%20")
		cfg.WAL.ReplicationURL = u.String()
	}
	r, err := relay.New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
}

// startHeldRelay runs h as a child process streaming s's slot, and waits
// until it streams it. The process dies with the test.
func startHeldRelay(t *testing.T, s *walSetup, h heldRelay) *exec.Cmd {
	t.Helper()
	h.URL, h.Slot, h.Publication = s.db.URL, s.slot, s.publication
	settings, err := json.Marshal(h)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWALHeldRelayProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), heldRelayEnv+"="+string(settings))
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	startDyingWithTest(t, cmd)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("held relay's output:\n%s", logs)
		}
	})
	for deadline := time.Now().Add(patience); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("the held relay exited:\n%s", logs)
		default:
		}
		if pos, active := s.slotPosition(t); active && pos != "" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the held relay does not stream slot %s", s.slot)
	}
	return cmd
}

// kill kills the child relay and waits until its session let go of the
// slot.
func (s *walSetup) killHeld(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Kill())
	require.Eventually(t, func() bool {
		_, active := s.slotPosition(t)
		return !active
	}, patience, 20*time.Millisecond, "the killed relay's session still streams slot %s", s.slot)
}

// insertBadRows commits n rows of an empty topic, one transaction each:
// no broker can take them, each goes to the dead letters. It returns their
// event ids.
func insertBadRows(t *testing.T, s *walSetup, prefix string, n int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for i := range n {
		id := uuid.NewString()
		_, err := s.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload) VALUES ($1, 'order.paid', 1, '', 'Order', $2, '{}')`, id, fmt.Sprintf("%s-%d", prefix, i))
		require.NoError(t, err)
		ids[id] = true
	}
	return ids
}

// A WAL relay killed after it moved bad rows to the dead letters, while
// the slot has not confirmed them (the broker has not acked the good event
// committed before them), leaves them to the next relay, which streams
// them again and finds them gone: it writes no second letter. Each bad
// event has one letter, each good one arrives.
func TestWALKilledAfterMovesWritesNoSecondDeadLetter(t *testing.T) {
	skipIfShort(t, "kills a relay process")
	t.Parallel()
	s := setupWAL(t)
	s.createSlot(t)
	held := startHeldRelay(t, s, heldRelay{})

	want := emitOrdersAs(t, s.client, "before", 4, 2, 0)
	bad := insertBadRows(t, s, "bad", 30)
	want.add(emitOrdersAs(t, s.client, "after", 4, 2, 0))
	letters := func() int {
		var n int
		require.NoError(t, s.db.DB.QueryRow(`SELECT count(*) FROM outbox_dead_letters`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return letters() >= len(bad) }, patience, 20*time.Millisecond,
		"the held relay moved %d of %d bad rows", letters(), len(bad))
	s.killHeld(t, held)

	logs := newCaptureLogs()
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub, Logger: logs}))
	got.waitFor(t, want, patience)
	// Stopping waits for the dead letters under way: the bad rows were
	// streamed before the last good event.
	require.NoError(t, stop())
	got.requireExactly(t, want)

	rows, err := s.db.DB.Query(`SELECT event_id::text, reason FROM outbox_dead_letters`)
	require.NoError(t, err)
	defer rows.Close()
	perEvent := map[string][]string{}
	for rows.Next() {
		var id, reason string
		require.NoError(t, rows.Scan(&id, &reason))
		perEvent[id] = append(perEvent[id], reason)
	}
	require.NoError(t, rows.Err())
	for id := range bad {
		require.Equal(t, []string{"topic is empty"}, perEvent[id], "the letters of bad event %s", id)
	}
	require.Len(t, perEvent, len(bad), "letters of other events")
	require.Len(t, logsOf(logs, watermill.InfoLogLevel, "A row streamed again already has its dead letter"), len(bad),
		"the next relay streamed every moved row again")
}

// The slot's confirmed position moves only past rows delivered or
// dead-lettered. With a short wal_sender_timeout the server sends
// keep-alives, with its WAL end, every half second; a relay whose broker
// holds every publish across several of them must not confirm that end.
// Killed and restarted with a broker that answers, it delivers every
// event.
func TestWALKeepAlivesWhileTheBrokerHoldsConfirmNothing(t *testing.T) {
	skipIfShort(t, "kills a relay process")
	t.Parallel()
	s := setupWAL(t)
	s.createSlot(t)
	// The relay's own status updates far apart: it answers the server's
	// keep-alives.
	held := startHeldRelay(t, s, heldRelay{SenderTimeout: "1s", StatusInterval: time.Minute})

	want := emitOrders(t, s.client, 40, 4, 5)
	var end string
	require.NoError(t, s.db.DB.QueryRow(`SELECT pg_current_wal_lsn()::text`).Scan(&end))
	// Held across keep-alives: the relay answered three of them since the
	// events committed (their replies are its only ones).
	var replies []time.Time
	require.Eventually(t, func() bool {
		var at sql.NullTime
		require.NoError(t, s.db.DB.QueryRow(`SELECT r.reply_time FROM pg_stat_replication r
			JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, s.slot).Scan(&at))
		if at.Valid && (len(replies) == 0 || at.Time.After(replies[len(replies)-1])) {
			replies = append(replies, at.Time)
		}
		return len(replies) >= 4 // the first may predate the events
	}, patience, 20*time.Millisecond, "the held relay answered %d keep-alives", len(replies))
	s.killHeld(t, held)
	var confirmedBefore bool
	require.NoError(t, s.db.DB.QueryRow(`SELECT confirmed_flush_lsn < $2::pg_lsn FROM pg_replication_slots
		WHERE slot_name = $1`, s.slot, end).Scan(&confirmedBefore))
	require.True(t, confirmedBefore, "the slot confirmed past rows the broker never acked")

	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub}))
	got.waitFor(t, want, patience)
	require.NoError(t, stop())
	got.requireExactly(t, want)
}
