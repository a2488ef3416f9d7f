package codegen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/entoutbox/entoutbox/broker"
)

// TestTopicTakenByEveryBroker checks that a topic the generator accepts is
// valid on every broker the relay can publish to, and that the generator
// refuses each topic some broker refuses.
func TestTopicTakenByEveryBroker(t *testing.T) {
	schemes := []string{"nats", "amqp", "redis", "kafka", "postgres", "mem"}
	for _, topic := range []string{
		"orders", "orders.created", "Orders-EU_2", "a", "a.b.c", "_orders", "amq", "amqp.orders", "_INBOXES",
		strings.Repeat("x", topicMaxLen), strings.Repeat("x", topicMaxLen+1), strings.Repeat("x", 250),
		">", "*", "orders.>", "orders.*", "a..b", ".a", "a.", ".", "..", "$SYS.x", "$JS.API", "$orders",
		"_INBOX.x", "_INBOX", "amq.x", "__consumer_offsets", "__x", "a b", "a\tb", "a/b", "a:b", "ordér", "a\x00b",
	} {
		var refusedBy []string
		for _, s := range schemes {
			if broker.ValidateTopic(s, topic) != nil {
				refusedBy = append(refusedBy, s)
			}
		}
		if topicProblem(topic) == "" {
			assert.Empty(t, refusedBy, "the generator accepts %q, which these brokers refuse", topic)
		} else if len(refusedBy) == 0 {
			t.Logf("%q: refused by the generator only (%s)", topic, topicProblem(topic))
		}
	}
	for _, topic := range []string{">", "orders.>", "a..b", "$SYS.x", "_INBOX.x", "amq.x", "__x", strings.Repeat("x", 46), "a/b"} {
		assert.NotEmpty(t, topicProblem(topic), "%q", topic)
	}
}
