package relay_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// then appends the events of later, committed after e's, to e: an
// aggregate in both gets later's after e's.
func (e *emitted) then(later emitted) {
	for id := range later.ids {
		e.ids[id] = true
	}
	for id := range later.rolledBack {
		e.rolledBack[id] = true
	}
	for agg, ids := range later.perAggregate {
		e.perAggregate[agg] = append(e.perAggregate[agg], ids...)
	}
}

// Rows committed before the relay's first start, before its slot exists,
// are never in the stream: the relay sends them itself, before the
// stream's rows, each aggregate's old rows before its new ones, and marks
// them delivered, so nothing is left pending.
func TestWALSendsRowsWrittenBeforeTheSlot(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrders(t, s.client, 150, 5, 7) // no slot yet
	old := len(want.ids)

	logs := watermill.NewCaptureLogger()
	// Publishes of varying length, many at a time: the stream's rows
	// would overtake the old ones of their aggregate if they were not
	// held until those are sent.
	stop := runRelay(t, s.config(relay.Config{Publisher: jitterPublisher{pubsub}, Logger: logs, BatchSize: 40}))
	waitStreaming(t, s)
	want.then(emitOrders(t, s.client, 50, 5, 7)) // the same aggregates, in the stream

	got.waitFor(t, want, patience)
	waitDelivered(t, s.emitBundle, 0)
	require.NoError(t, stop())
	got.requireExactly(t, want)
	got.requireRowIDs(t, s.db.DB)
	var named []any
	for _, m := range logs.Captured()[watermill.InfoLogLevel] {
		if strings.HasPrefix(m.Msg, "Sending the rows written before the replication slot's start") {
			named = append(named, m.Fields["rows"])
		}
	}
	require.Equal(t, []any{int64(old)}, named, "the log counts the rows written before the slot, once")
}

// A relay killed again and again while it sends the rows written before
// its slot's start: every row arrives, each aggregate's first arrivals in
// commit order (the old rows before the stream's), duplicates at most a
// batch per kill, and nothing stays pending.
func TestWALKilledWhileSendingRowsWrittenBeforeTheSlot(t *testing.T) {
	skipIfShort(t, "kills relay processes")
	t.Parallel()
	bin, err := buildCommand()
	require.NoError(t, err)
	// Redis Streams keeps every publish: duplicates show.
	const brokerURL = "redis://127.0.0.1:6379/0"
	s := setupWAL(t)
	direct := openBroker(t, brokerURL, "Redis at 127.0.0.1:6379")
	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)

	const batch = 20
	start := func() (*exec.Cmd, *lockedBuffer) {
		cmd := exec.Command(bin, "relay", "--path", "wal", "--slot", s.slot, "--publication", s.publication,
			"--broker", brokerURL, "--topic-prefix", prefix, "--batch-size", fmt.Sprint(batch), "--retry-interval", "50ms",
			"--log-level", "info")
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+s.db.URL)
		logs := &lockedBuffer{}
		cmd.Stderr = logs
		startDyingWithTest(t, cmd)
		return cmd, logs
	}
	want := emitOrders(t, s.client, 800, 8, 9) // before the slot exists
	old := len(want.ids)

	kills, midCatchUp := 0, 0
	for kills < 4 {
		before := got.distinct()
		cmd, logs := start()
		for deadline := time.Now().Add(time.Minute); got.distinct() <= before+batch && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond)
		}
		if got.distinct() < old {
			midCatchUp++
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		kills++
		if kills == 1 {
			require.Contains(t, logs.String(), "Sending the rows written before the replication slot's start")
			// The slot exists now: these are in the stream, behind the
			// old rows of their aggregates.
			want.then(emitOrders(t, s.client, 80, 8, 9))
		}
	}
	require.Positive(t, midCatchUp, "no kill happened while the old rows were being sent")
	final, logs := start()
	got.waitFor(t, want, patience)
	waitDelivered(t, s.emitBundle, 0)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "Sent the rows written before") },
		patience, 10*time.Millisecond, "relay logs:\n%s", logs.String())
	stopGracefully(t, final, logs)
	dups := got.duplicatesOf(t, want)
	got.mu.Lock()
	defer got.mu.Unlock()
	t.Logf("%d events (%d before the slot), %d kills (%d while sending those), %d duplicates",
		len(want.ids), old, kills, midCatchUp, dups)
	require.LessOrEqual(t, dups, kills*batch, "duplicates beyond a batch per kill")
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, firstSeenOf(got, agg), "first arrivals of aggregate %s in commit order", agg)
	}
}

// A slot dropped (as one the server invalidated must be) and made again
// by the next relay: the rows committed while there was none are sent,
// and those the old slot delivered are not sent again.
func TestWALNewSlotSendsTheGapNotWhatTheOldSlotDelivered(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	cfg := s.config(relay.Config{Publisher: pubsub})
	stop := runRelay(t, cfg)
	waitStreaming(t, s)
	want := emitOrders(t, s.client, 60, 4, 0)
	got.waitFor(t, want, patience)
	waitDelivered(t, s.emitBundle, 0) // recorded in the progress table
	require.NoError(t, stop())

	require.Eventually(t, func() bool {
		_, err := s.db.DB.Exec(`SELECT pg_drop_replication_slot($1)`, s.slot)
		return err == nil
	}, patience, 50*time.Millisecond, "the slot stays active")
	want.then(emitOrders(t, s.client, 40, 4, 0)) // no slot: never streamed

	stop = runRelay(t, cfg)
	got.waitFor(t, want, patience)
	waitDelivered(t, s.emitBundle, 0)
	require.NoError(t, stop())
	got.requireExactly(t, want)
}
