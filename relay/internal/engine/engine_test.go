package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/metrics"
)

// scriptedPublisher fails the publishes of some messages with the given
// errors; its broker answers pings when up.
type scriptedPublisher struct {
	fail map[string]error
	up   bool
}

func (p scriptedPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if err := p.fail[m.UUID]; err != nil {
			return err
		}
	}
	return nil
}

func (scriptedPublisher) Close() error { return nil }

func (p scriptedPublisher) Ping(context.Context) error {
	if !p.up {
		return errors.New("no broker")
	}
	return nil
}

type invalidTopic struct{}

func (invalidTopic) Error() string   { return "invalid topic" }
func (invalidTopic) Permanent() bool { return true }

// testDelivery records the outcome the engine took back to it.
type testDelivery struct {
	r       *Row
	msg     *message.Message
	refused bool // MayPublish says no
	outcome chan string
	dec     Decision
}

func newTestDelivery(attempts int, refused bool) *testDelivery {
	r := &Row{ID: 1, EventID: uuid.New(), Name: "order.paid", Version: 1, Topic: "orders", AggregateType: "Order",
		AggregateID: "o-1", Payload: []byte(`{}`), Attempts: attempts, CreatedAt: time.Now()}
	return &testDelivery{r: r, msg: r.Message(nil), refused: refused, outcome: make(chan string, 2)}
}

func (d *testDelivery) Row() *Row                 { return d.r }
func (d *testDelivery) Message() *message.Message { return d.msg }
func (d *testDelivery) MayPublish() bool          { return !d.refused }
func (d *testDelivery) Delivered()                { d.outcome <- "delivered" }
func (d *testDelivery) Unsent()                   { d.outcome <- "unsent" }
func (d *testDelivery) Failed(dec Decision)       { d.dec = dec; d.outcome <- "failed" }

// The engine publishes what a source hands out and takes each outcome
// back: delivered, unsent when the source may no longer have it published,
// and a failure as the policy decides, counted only when the broker
// answers (outages do not count), at once to the dead letters when no
// retry cures it.
func TestEngineTakesEachOutcomeBack(t *testing.T) {
	seconds := func(n int) time.Duration { return time.Duration(n) * time.Second }
	policy := Policy{MaxAttempts: 3, Backoff: seconds}
	for _, up := range []bool{true, false} {
		t.Run(fmt.Sprintf("broker up %v", up), func(t *testing.T) {
			ok, refused, rejected, invalid := newTestDelivery(0, false), newTestDelivery(0, true),
				newTestDelivery(1, false), newTestDelivery(0, false)
			pub := scriptedPublisher{up: up, fail: map[string]error{rejected.msg.UUID: errors.New("rejected"),
				invalid.msg.UUID: invalidTopic{}}}
			e := New(Settings{Publisher: pub, Logger: watermill.NopLogger{}}, 2, policy)
			queue := []Delivery{ok, refused, rejected, invalid}
			e.Run(context.Background(), func(context.Context) (Delivery, bool) {
				if len(queue) == 0 {
					return nil, false
				}
				d := queue[0]
				queue = queue[1:]
				return d, true
			})
			require.True(t, e.Stop(time.Minute))
			outcome := func(d *testDelivery) string {
				select {
				case o := <-d.outcome:
					return o
				case <-time.After(time.Minute):
					return "none"
				}
			}
			require.Equal(t, "delivered", outcome(ok))
			require.Equal(t, "unsent", outcome(refused))
			require.Equal(t, "failed", outcome(rejected))
			if up {
				require.Equal(t, Decision{Reason: "rejected", Attempts: 2, Counted: true, Wait: 2 * time.Second}, rejected.dec)
			} else {
				require.Equal(t, Decision{Reason: "rejected", Attempts: 1, Wait: time.Second}, rejected.dec,
					"an outage: not counted")
			}
			require.Equal(t, "failed", outcome(invalid))
			require.Equal(t, Decision{DeadLetter: true, Reason: "refused for good: invalid topic",
				Class: metrics.ReasonPermanent, Attempts: 1, Counted: true}, invalid.dec, "permanent, broker up or not")
		})
	}
}
