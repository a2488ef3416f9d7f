package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/relay"
)

// emitted is what the test committed: event ids in commit order per aggregate.
type emitted struct {
	ids          map[string]bool
	rolledBack   map[string]bool
	perAggregate map[string][]string
}

// add takes in the events of e, whose aggregates are not in want yet.
func (want *emitted) add(e emitted) {
	for id := range e.ids {
		want.ids[id] = true
	}
	for id := range e.rolledBack {
		want.rolledBack[id] = true
	}
	for agg, ids := range e.perAggregate {
		want.perAggregate[agg] = ids
	}
}

// emitOrders commits n OrderPaid events over the given number of
// aggregates, and rolls back every rollbackEvery-th transaction (0: none).
func emitOrders(t *testing.T, client *testent.Client, n, aggregates, rollbackEvery int) emitted {
	t.Helper()
	return emitOrdersAs(t, client, "order", n, aggregates, rollbackEvery)
}

// emitOrdersAs is emitOrders with aggregate ids of its own, for emitters
// running side by side.
func emitOrdersAs(t *testing.T, client *testent.Client, prefix string, n, aggregates, rollbackEvery int) emitted {
	t.Helper()
	ctx := context.Background()
	e := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
	errRollback := errors.New("rolled back on purpose")
	for i := 1; i <= n; i++ {
		agg := fmt.Sprintf("%s-%d", prefix, i%aggregates)
		id := uuid.New()
		rollback := rollbackEvery > 0 && i%rollbackEvery == 0
		err := client.WithTx(ctx, func(tx *testent.Tx) error {
			if err := tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: int64(i), AmountCents: 100},
				events.WithEventID(id), events.WithHeader("correlation_id", "c-"+strconv.Itoa(i))); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		// t.Errorf, not require: writers run in goroutines of their own.
		if rollback {
			if !errors.Is(err, errRollback) {
				t.Errorf("rolled-back transaction %d: %v", i, err)
				return e
			}
			e.rolledBack[id.String()] = true
			continue
		}
		if err != nil {
			t.Errorf("committing event %d: %v", i, err)
			return e
		}
		e.ids[id.String()] = true
		e.perAggregate[agg] = append(e.perAggregate[agg], id.String())
	}
	return e
}

// received is what a consumer saw.
type received struct {
	mu           sync.Mutex
	count        map[string]int
	perAggregate map[string][]string
	msgs         map[string]*message.Message
}

func newReceived() *received {
	return &received{count: map[string]int{}, perAggregate: map[string][]string{}, msgs: map[string]*message.Message{}}
}

func (r *received) add(msg *message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[msg.UUID]++
	agg := msg.Metadata.Get(events.MetaAggregateID)
	r.perAggregate[agg] = append(r.perAggregate[agg], msg.UUID)
	r.msgs[msg.UUID] = msg
}

// requireRowIDs checks every message received went out under its outbox
// row's publish id, the broker's message id (JetStream's Nats-Msg-Id),
// which a dead-letter retry's new row changes, and with the row's place
// in its aggregate's order (outbox_aggregate_seq), which consumers apply
// events in.
func (r *received) requireRowIDs(t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.Query(`SELECT event_id::text, id, aggregate_seq FROM outbox_events`)
	require.NoError(t, err)
	defer rows.Close()
	rowIDs, seqs := map[string]int64{}, map[string]int64{}
	for rows.Next() {
		var event string
		var id, seq int64
		require.NoError(t, rows.Scan(&event, &id, &seq))
		require.Positive(t, seq, "Emit numbered event %s", event)
		rowIDs[event], seqs[event] = id, seq
	}
	require.NoError(t, rows.Err())
	r.mu.Lock()
	defer r.mu.Unlock()
	for event, msg := range r.msgs {
		require.Contains(t, rowIDs, event, "a row for each message received")
		require.Equal(t, outbox.PublishID(event, rowIDs[event]), msg.Metadata.Get(events.MetaPublishID),
			"the publish id of event %s", event)
		require.Equal(t, strconv.FormatInt(seqs[event], 10), msg.Metadata.Get(events.MetaAggregateSeq),
			"the aggregate_seq of event %s", event)
	}
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.count)
}

// consume acks everything from msgs into r until ctx ends.
func consume(ctx context.Context, msgs <-chan *message.Message, r *received) {
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			r.add(msg)
			msg.Ack()
		}
	}
}

// waitFor waits until r holds every id of want.
func (r *received) waitFor(t *testing.T, want emitted, timeout time.Duration) {
	t.Helper()
	missing := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for id := range want.ids {
			if r.count[id] == 0 {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		n := missing()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every committed event arrived within %s: %d of %d missing", timeout, n, len(want.ids))
		}
	}
}

// requireExactly asserts: every committed event, none rolled back, no
// duplicate, per-aggregate order as committed.
func (r *received) requireExactly(t *testing.T, want emitted) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.count {
		require.False(t, want.rolledBack[id], "event %s of a rolled-back transaction was delivered", id)
		require.True(t, want.ids[id], "unknown event %s delivered", id)
		require.Equal(t, 1, n, "event %s delivered %d times", id, n)
	}
	require.Len(t, r.count, len(want.ids))
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, r.perAggregate[agg], "order of aggregate %s", agg)
	}
}

// patience bounds each wait for what a relay, a broker or PostgreSQL will
// do (a delivery, a drain, a process starting, a status changing): a
// liveness bound, not a speed limit. A passing test waits only as long as
// the work takes; on a loaded 2-core machine that is ten times as long as
// on an idle one. Windows a test asserts on (nothing sent before a lease
// ends, nothing within a moment) are written where they are.
const patience = 3 * time.Minute

// skipIfShort leaves a fault, kill or soak test out of go test -short: the
// tests that wait out leases, outages and restarts, kill processes or move
// hundreds of megabytes. The full run keeps them all.
func skipIfShort(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + what)
	}
}

// runRelay starts a relay and returns a function that stops it and returns
// Run's error.
func runRelay(t *testing.T, cfg relay.Config) func() error {
	t.Helper()
	r, err := relay.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(patience):
			return fmt.Errorf("relay did not stop within %s", patience)
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func requirePayload(t *testing.T, msg *message.Message) {
	t.Helper()
	var p testent.OrderPaid
	require.NoError(t, json.Unmarshal(msg.Payload, &p))
	require.Equal(t, "EUR", p.Currency)
}

// waitDelivered waits until the relay has recorded every committed row as
// delivered.
func waitDelivered(t *testing.T, b *emitBundle, deadLetters int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		if b.db == nil && !b.mysql { // SQLite: the backlog's reads are PostgreSQL's and MySQL's
			var pending, letters int64
			require.NoError(t, b.sql.QueryRow(`SELECT (SELECT count(*) FROM outbox_events WHERE delivered_at IS NULL),
				(SELECT count(*) FROM outbox_dead_letters)`).Scan(&pending, &letters))
			return pending == 0 && letters == deadLetters
		}
		backlog, err := relay.ReadBacklog(context.Background(), b.sql, "", "")
		require.NoError(t, err)
		return backlog.Pending == 0 && backlog.DeadLetters == deadLetters
	}, patience, 20*time.Millisecond, "rows still pending")
}

// firstSeen is, per aggregate, the order in which event ids first arrived.
func (r *received) firstSeen() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	seen := map[string]bool{}
	for agg, ids := range r.perAggregate {
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				out[agg] = append(out[agg], id)
			}
		}
	}
	return out
}
