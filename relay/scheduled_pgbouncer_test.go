package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/relay"
)

// Behind PgBouncer in transaction mode, with PollOnly (no LISTEN) or with
// a LISTEN through the pooler that hears nothing, the promoter still moves
// scheduled events when due, looking at least every few seconds: the
// promotion is one statement, its lock held by its own transaction.
func TestScheduledEventsBehindPgBouncer(t *testing.T) {
	t.Parallel()
	for name, pollOnly := range map[string]bool{"poll only": true, "listening through the pooler": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := setupPath(t, relay.PathFast)
			pooled, err := pgschema.Open(startPgBouncer(t, p.emitBundle))
			require.NoError(t, err)
			t.Cleanup(func() { pooled.Close() })
			b := openBroker(t, "mem://", "")
			prefix := uniquePrefix()
			got := receiveTimed(t, b, p.db.DB, prefix)
			runRelay(t, p.config(relay.Config{DB: pooled, Publisher: b.Publisher(), TopicPrefix: prefix,
				Fast: relay.FastConfig{PollOnly: pollOnly}}))
			var ids []string
			for i := range 3 {
				ids = append(ids, emitOne(t, p.client, "pooled", events.DeliverAfter(time.Duration(i+1)*time.Second)))
			}
			got.waitFor(t, ids, patience)
			byID, _ := got.first()
			requireNeverEarly(t, byID, ids, 0)
		})
	}
}
