package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/consumerposition"
	"github.com/entoutbox/entoutbox/metrics"
)

// Every repair of a held aggregate's dead letters, in every order tried,
// ends with the aggregate moving, or held behind a letter that status
// names and a command frees: discarding a letter skips its event, retrying
// it applies it, a replay is a duplicate of what was applied or skipped.
// Order 1's seq 2 goes to the dead letters (its handler fails, or the
// broker lost it: "lost"), seq 3 is set aside behind it (or applied, with
// WithPassOverDeadLetters), then the steps run; seq 5 comes last, and the
// effects must be want, in that order, with nothing held or open.
//
// Steps: "discard N|all", "discard-alone N|all" (marked as an earlier
// version did, leaving the position held), "retry N|all" (the retried events delivered
// in seq order, as the relay sends them), "retry-only N" and "deliver N"
// (the retried event delivered later), "replay" (seqs 1 to 3 delivered
// again, as `entoutbox replay` sends them), "send N" (a new event), "held
// N" (the aggregate is held at N: status says so, with the letter of N
// when there is one).
func TestEveryRepairLeavesTheAggregateMoving(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		pass, lost bool
		relay      bool // lost: the relay set seq 2 aside (its own letter), never sending it
		steps      []string
		want       []int64
	}{
		{name: "discard all", steps: []string{"discard all", "send 4"}, want: []int64{1, 4, 5}},
		{name: "discard the held letter", steps: []string{"discard 2", "held 3", "send 4", "held 3", "retry all"},
			want: []int64{1, 3, 4, 5}},
		{name: "discard the held letter, then the one behind", steps: []string{"discard 2", "discard 3", "send 4"},
			want: []int64{1, 4, 5}},
		{name: "discard the letter behind", steps: []string{"discard 3", "held 2", "send 4", "held 2", "retry all"},
			want: []int64{1, 2, 4, 5}},
		{name: "retry the held letter, then discard the one behind", steps: []string{"retry 2", "held 3", "discard 3", "send 4"},
			want: []int64{1, 2, 4, 5}},
		{name: "discard the letter behind, then retry the held one", steps: []string{"discard 3", "retry 2", "send 4"},
			want: []int64{1, 2, 4, 5}},
		{name: "retry the held letter, discard the one behind before the retry comes", steps: []string{"retry-only 2", "discard 3",
			"deliver 2", "send 4"}, want: []int64{1, 2, 4, 5}},
		{name: "retry the held letter only", steps: []string{"retry 2", "send 4", "held 3", "retry all"},
			want: []int64{1, 2, 3, 4, 5}},
		{name: "retry all", steps: []string{"retry all", "send 4"}, want: []int64{1, 2, 3, 4, 5}},
		{name: "discard the held letter, retry the one behind", steps: []string{"discard 2", "retry 3", "send 4"},
			want: []int64{1, 3, 4, 5}},
		{name: "replay, then discard all", steps: []string{"replay", "held 2", "discard all", "send 4"}, want: []int64{1, 4, 5}},
		{name: "discard all, then replay", steps: []string{"discard all", "replay", "send 4"}, want: []int64{1, 4, 5}},
		{name: "discard all, then retry (skipped), then replay", steps: []string{"discard all", "retry all", "replay", "send 4"},
			want: []int64{1, 4, 5}},
		{name: "replay, then retry all", steps: []string{"replay", "retry all", "send 4"}, want: []int64{1, 2, 3, 4, 5}},
		{name: "discarded by an earlier version, which left the position alone", steps: []string{"discard-alone all", "send 4"},
			want: []int64{1, 4, 5}},
		{name: "the held letter behind a retried one, discarded by an earlier version", steps: []string{"retry 2", "held 3",
			"discard-alone 3", "send 4"}, want: []int64{1, 2, 4, 5}},
		{name: "pass over, discard", pass: true, steps: []string{"discard 2", "send 4"}, want: []int64{1, 3, 4, 5}},
		{name: "pass over, retry", pass: true, steps: []string{"retry 2", "send 4"}, want: []int64{1, 3, 2, 4, 5}},
		{name: "pass over, replay, then retry", pass: true, steps: []string{"replay", "retry all", "send 4"},
			want: []int64{1, 3, 2, 4, 5}},
		{name: "pass over, replay, then discard", pass: true, steps: []string{"replay", "discard all", "send 4"},
			want: []int64{1, 3, 4, 5}},
		{name: "lost at the broker: replay, then retry all", lost: true, steps: []string{"held 2", "send 4", "held 2", "replay",
			"held 3", "retry all"}, want: []int64{1, 2, 3, 4, 5}},
		{name: "lost at the broker: discard, then replay", lost: true, steps: []string{"discard all", "held 2", "send 4",
			"held 2", "replay", "held 4", "retry all"}, want: []int64{1, 2, 4, 5}},
		{name: "never sent: the relay's letter discarded", lost: true, relay: true, steps: []string{"held 2",
			"discard relay", "held 3", "retry all", "send 4"}, want: []int64{1, 3, 4, 5}},
		{name: "never sent: the relay's letter discarded, then the consumer's", lost: true, relay: true, steps: []string{"send 4",
			"discard relay", "held 3", "discard all"}, want: []int64{1, 5}},
		{name: "never sent: the relay's letter retried", lost: true, relay: true, steps: []string{"held 2", "retry-relay",
			"held 3", "retry all", "send 4"}, want: []int64{1, 2, 3, 4, 5}},
		{name: "lost at the broker: discard all after replay", lost: true, steps: []string{"send 4", "replay", "held 3",
			"discard all"}, want: []int64{1, 2, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRepairs(t, c.pass, c.lost, c.relay)
			for _, step := range c.steps {
				r.run(t, step)
			}
			r.send(t, 5)
			require.Equal(t, c.want, r.b.applied(t, "billing", 1), "the effects, in order")
			pos := r.b.client.ConsumerPosition.Query().Where(consumerposition.AggregateID("1")).OnlyX(context.Background())
			require.Equal(t, int64(5), pos.LastSeq)
			require.Nil(t, pos.HeldSeq, "not held")
			st := r.status(t)
			require.Empty(t, st.Held, "status holds nothing")
			require.Zero(t, st.DeadLetters.BySource["billing"], "no open letter")
		})
	}
}

// repairs is one case of TestEveryRepairLeavesTheAggregateMoving.
type repairs struct {
	b    *bundle
	h    *testent.OutboxHandlers
	a    *admin.Admin
	msgs map[int64]*message.Message // order 1's events by seq
}

func newRepairs(t *testing.T, pass, lost, relay bool) *repairs {
	t.Helper()
	b := setup(t)
	var calls atomic.Int64
	var broken atomic.Bool
	broken.Store(!lost)
	opts := append(fast(), consumer.WithMaxAttempts(1), consumer.WithGapWait(100*time.Millisecond),
		consumer.WithMaxGap(time.Second))
	if pass {
		opts = append(opts, consumer.WithPassOverDeadLetters())
	}
	h := testent.NewOutboxHandlers(b.client, opts...)
	h.OnOrderPaid("billing", seqHandler(&calls, func(seq int64) bool { return seq == 2 && broken.Load() }))
	a, err := admin.Open(b.db.DB, admin.Tables{})
	require.NoError(t, err)
	// The counter Emit would have left: a retry writes the event again
	// under its number, which the database takes only at or below it.
	_, err = b.db.DB.Exec(`INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq)
		VALUES ('orders', 'Order', '1', 5)`)
	require.NoError(t, err)
	r := &repairs{b: b, h: h, a: a, msgs: map[int64]*message.Message{}}
	for seq := int64(1); seq <= 5; seq++ {
		r.msgs[seq] = seqMessage(t, 1, seq)
	}
	r.send(t, 1)
	if !lost {
		r.send(t, 2)
	}
	if relay {
		_, err := b.db.DB.Exec(`INSERT INTO outbox_dead_letters (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
			VALUES ($1, 'relay', 'order.paid', 1, 'orders', 'Order', '1', 2, $2, $3::jsonb, 'the broker refused it', 3, now())`,
			r.msgs[2].UUID, r.msgs[2].Payload, headersJSON(t, r.msgs[2]))
		require.NoError(t, err)
	}
	r.send(t, 3) // lost: after MaxGap, a letter saying seq 2 never arrived
	broken.Store(false)
	return r
}

// run runs one step.
func (r *repairs) run(t *testing.T, step string) {
	t.Helper()
	ctx := context.Background()
	verb, arg, _ := strings.Cut(step, " ")
	seq, _ := strconv.ParseInt(arg, 10, 64)
	switch verb {
	case "send", "deliver":
		r.send(t, seq)
	case "replay":
		for seq := int64(1); seq <= 3; seq++ {
			r.send(t, seq)
		}
	case "held":
		r.requireHeld(t, seq)
	case "discard":
		_, err := r.a.Discard(ctx, "by hand", r.letters(t, arg)...)
		require.NoError(t, err)
	case "retry-relay": // the relay sends the event again, as it would
		ds, err := r.a.ListDeadLetters(ctx, admin.Filter{Source: "relay", State: admin.StateOpen})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		_, err = r.a.Retry(ctx, ds[0].ID)
		require.NoError(t, err)
		r.send(t, 2)
	case "discard-alone": // the letters marked, the positions left as they were
		for _, id := range r.letters(t, arg) {
			_, err := r.b.db.DB.Exec(`UPDATE outbox_dead_letters SET discarded_at = now(), discard_note = 'by hand' WHERE id = $1`, id)
			require.NoError(t, err)
		}
	case "retry", "retry-only":
		ids := r.letters(t, arg)
		res, err := r.a.Retry(ctx, ids...)
		require.NoError(t, err)
		if verb == "retry-only" {
			return
		}
		var seqs []int64
		for _, x := range res {
			if x.Outcome != admin.Skipped {
				seqs = append(seqs, r.seqOf(x.EventID))
			}
		}
		slices.Sort(seqs)
		for _, seq := range seqs {
			r.send(t, seq)
		}
	default:
		t.Fatalf("no step %q", step)
	}
}

// send delivers order 1's event seq until it is acknowledged.
func (r *repairs) send(t *testing.T, seq int64) {
	t.Helper()
	// A delivery that neither acks nor nacks (waiting for ever) ends with
	// the context.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := r.h.Handle(ctx, "billing", r.msgs[seq].Copy())
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("seq %d not acknowledged within 30s: %v", seq, err)
		}
	}
}

// letters are the open letters of billing arg names: a seq, or all; or
// the relay's, all of them.
func (r *repairs) letters(t *testing.T, arg string) []int64 {
	t.Helper()
	source := "billing"
	if arg == "relay" {
		source, arg = "relay", "all"
	}
	ds, err := r.a.ListDeadLetters(context.Background(), admin.Filter{Source: source, State: admin.StateOpen})
	require.NoError(t, err)
	var ids []int64
	for _, d := range ds {
		if arg == "all" || fmt.Sprint(r.seqOf(d.EventID)) == arg {
			ids = append(ids, d.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// headersJSON is msg's metadata as the relay's letter keeps it.
func headersJSON(t *testing.T, msg *message.Message) string {
	t.Helper()
	b, err := json.Marshal(msg.Metadata)
	require.NoError(t, err)
	return string(b)
}

func (r *repairs) seqOf(id uuid.UUID) int64 {
	for seq, m := range r.msgs {
		if m.UUID == id.String() {
			return seq
		}
	}
	return 0
}

func (r *repairs) status(t *testing.T) admin.Status {
	t.Helper()
	st, err := admin.ReadTablesStatus(context.Background(), r.b.db.DB, admin.Tables{})
	require.NoError(t, err)
	return st
}

// requireHeld checks that order 1 is held at seq, that status says so,
// naming the event when its letter is open, and that a letter of billing
// is open to act on (a command frees the aggregate).
func (r *repairs) requireHeld(t *testing.T, seq int64) {
	t.Helper()
	pos := r.b.client.ConsumerPosition.Query().Where(consumerposition.AggregateID("1")).OnlyX(context.Background())
	require.NotNil(t, pos.HeldSeq, "held")
	require.Equal(t, seq, *pos.HeldSeq, "held at seq %d", seq)
	require.Equal(t, seq-1, pos.LastSeq)
	st := r.status(t)
	require.Len(t, st.Held, 1)
	require.Equal(t, int64(1), st.Held[0].Count)
	require.Equal(t, seq, st.Held[0].Oldest[0].Seq)
	if ids := r.letters(t, strconv.FormatInt(seq, 10)); len(ids) > 0 {
		require.Equal(t, r.msgs[seq].UUID, st.Held[0].Oldest[0].EventID, "status names the held letter's event")
	} else {
		require.Empty(t, st.Held[0].Oldest[0].EventID, "seq %d never arrived", seq)
	}
}

// An event set aside before that comes again (a redelivery, a replay)
// writes no second letter, and is neither logged nor counted as one.
func TestAnEventSetAsideAgainIsNotLoggedOrCountedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &captureLogger{}
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(1), consumer.WithLogger(logs),
		consumer.WithMetrics(m))...)
	h.OnOrderPaid("billing", seqHandler(&calls, func(seq int64) bool { return seq == 2 }))
	second, third := seqMessage(t, 1, 2), seqMessage(t, 1, 3)
	require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
	for range 3 {
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
		require.NoError(t, h.Handle(ctx, "billing", third.Copy()))
	}
	require.Equal(t, 2, b.client.DeadLetter.Query().CountX(ctx), "one letter each")
	logs.mu.Lock()
	lettered := 0
	for _, msg := range logs.msgs {
		if msg.Msg == consumer.DeadLetteredLog {
			lettered++
		}
	}
	logs.mu.Unlock()
	require.Equal(t, 2, lettered, "each letter logged once")
	count := func(reason string) float64 {
		return promtest.Value(t, reg, "entoutbox_consumer_dead_lettered_total", "consumer", "billing", "reason", reason)
	}
	require.Equal(t, 1.0, count(metrics.ReasonMaxAttempts), "seq 2")
	require.Equal(t, 1.0, count(metrics.ReasonHeld), "seq 3, once")
}
