package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// Bad rows committed from four connections at once, one per transaction,
// with good events between them: each bad row reaches the dead letters
// once, with its own reason, and leaves the outbox; the good events are
// delivered. The stream can show a transaction's commit before a snapshot
// of another connection sees it: the move must wait for the row then, not
// take it for gone.
func TestWALDeadLettersConcurrentBadRows(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub}))
	waitStreaming(t, s)

	const writers, badEach, goodEvery = 4, 150, 10
	ctx := context.Background()
	var (
		mu   sync.Mutex
		bad  = map[string]bool{}
		want = emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
		wg   sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection per writer: its commits race the relay's own
			// connection.
			conn, err := s.db.DB.Conn(ctx)
			if err != nil {
				t.Errorf("writer %d: opening a connection: %v", w, err)
				return
			}
			defer conn.Close()
			for i := range badEach {
				id := uuid.NewString()
				if _, err := conn.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, event_version, topic,
					aggregate_type, aggregate_id, payload) VALUES ($1, 'order.paid', 1, '', 'Order', $2, '{}')`,
					id, fmt.Sprintf("bad-%d-%d", w, i)); err != nil {
					t.Errorf("writer %d: inserting bad row %d: %v", w, i, err)
					return
				}
				mu.Lock()
				bad[id] = true
				mu.Unlock()
				if i%goodEvery == 0 {
					e := emitOrdersAs(t, s.client, fmt.Sprintf("good-%d-%d", w, i), 1, 1, 0)
					mu.Lock()
					want.add(e)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, bad, writers*badEach)

	countLetters := func() int {
		var n int
		require.NoError(t, s.db.DB.QueryRow(`SELECT count(*) FROM outbox_dead_letters`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return countLetters() >= len(bad) }, patience, 50*time.Millisecond,
		"dead letters: %d of %d", countLetters(), len(bad))
	got.waitFor(t, want, patience)
	// Stopping waits for the moves under way: nothing is added after.
	require.NoError(t, stop())
	got.requireExactly(t, want)

	letters := deadLetters(t, s.emitBundle)
	require.Equal(t, len(bad), countLetters(), "one dead letter per bad row")
	otherReasons := map[string]int{}
	for id := range bad {
		d, ok := letters[id]
		require.True(t, ok, "bad row %s has no dead letter", id)
		if d.reason != "topic is empty" {
			otherReasons[d.reason]++
		}
	}
	var left, leftBad int
	require.NoError(t, s.db.DB.QueryRow(`SELECT count(*), count(*) FILTER (WHERE topic = '') FROM outbox_events`).
		Scan(&left, &leftBad))
	require.Empty(t, otherReasons, "dead letters with another reason than the row's (%d bad rows still in the outbox)", leftBad)
	require.Zero(t, leftBad, "bad rows still in the outbox")
	require.Equal(t, len(want.ids), left, "the good rows stay (the WAL path does not delete them)")
}
