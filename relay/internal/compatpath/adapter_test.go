package compatpath

import (
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// outboxScan hands the compatible path's SELECT columns of a row to
// UnmarshalMessage, as database/sql would.
type outboxScan struct {
	r    engine.Row
	txID uint64
}

func (s outboxScan) Scan(dest ...any) error {
	vals := []any{s.r.ID, s.txID, s.r.EventID, s.r.Name, s.r.Version, s.r.Topic, s.r.AggregateType, s.r.AggregateID,
		s.r.Payload, s.r.Headers, s.r.CreatedAt, int64(s.r.ReadableFrom), s.r.AggregateSeq}
	if len(dest) != len(vals) {
		return fmt.Errorf("%d destinations for %d columns", len(dest), len(vals))
	}
	for i, d := range dest {
		switch d := d.(type) {
		case *int64:
			*d = vals[i].(int64)
		case *int:
			*d = vals[i].(int)
		case *string:
			*d = vals[i].(string)
		case *[]byte:
			*d = vals[i].([]byte)
		case *time.Time:
			*d = vals[i].(time.Time)
		case *uuid.UUID:
			*d = vals[i].(uuid.UUID)
		case *wsql.XID8:
			*d = wsql.XID8(vals[i].(uint64))
		case *stdsql.NullInt64:
			v := vals[i].(int64)
			*d = stdsql.NullInt64{Int64: v, Valid: v != 0}
		default:
			return fmt.Errorf("column %d: no conversion to %T", i, d)
		}
	}
	return nil
}

// The compatible path sends the message every read path builds of a row
// (Row.Message), in the forwarder's envelope: the same metadata, bound for
// the row's topic behind the prefix. A malformed row says why under
// MetaRowError, and its envelope gives the log what it needs back.
func TestCompatibleEnvelopeIsTheRowsMessage(t *testing.T) {
	// What the relay's CloudEvents would add, as it adds it: to the
	// metadata of every message.
	attrs := func(md message.Metadata, eventID, name string, version int, _ time.Time) {
		md["ce_type"] = fmt.Sprintf("%s.v%d", name, version)
	}
	adapter := SchemaAdapter{TopicPrefix: "staging_", Attributes: attrs}
	r := engine.Row{ID: 42, EventID: uuid.New(), Name: "order.paid", Version: 2, Topic: "orders", AggregateType: "Order",
		AggregateID: "order-7", Payload: []byte(`{"order_id":7}`), Headers: []byte(`{"correlation_id":"c-7"}`),
		ReadableFrom: 1, AggregateSeq: 3, CreatedAt: time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)}

	read := func(r engine.Row) (wsql.Row, forwarderEnvelope) {
		t.Helper()
		out, err := adapter.UnmarshalMessage(wsql.UnmarshalMessageParams{Row: outboxScan{r: r, txID: 900}})
		require.NoError(t, err)
		var env forwarderEnvelope
		require.NoError(t, json.Unmarshal(out.Msg.Payload, &env))
		return out, env
	}

	out, env := read(r)
	want := r
	require.NoError(t, want.Check())
	msg := want.Message(attrs)
	require.Equal(t, map[string]string(msg.Metadata), env.Metadata)
	require.Equal(t, "c-7", env.Metadata["correlation_id"])
	require.Equal(t, "order.paid.v2", env.Metadata["ce_type"])
	require.Equal(t, "staging_orders", env.DestinationTopic)
	require.Equal(t, r.EventID.String(), env.UUID)
	require.Equal(t, r.Payload, env.Payload)
	require.Equal(t, int64(42), out.Offset)
	require.Equal(t, "42", out.Msg.Metadata.Get(MetaRowID))
	require.Empty(t, out.Msg.Metadata.Get(MetaRowError))

	broken := r
	broken.AggregateID = ""
	out, env = read(broken)
	require.Equal(t, "aggregate_id is empty", out.Msg.Metadata.Get(MetaRowError))
	logged := env.row(42, adapter.TopicPrefix)
	require.Equal(t, engine.Row{ID: 42, EventID: r.EventID, Name: "order.paid", Topic: "orders", AggregateType: "Order"}, *logged)
	require.Equal(t, "order.paid", env.Metadata[events.MetaEventName])
}
