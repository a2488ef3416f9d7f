package engine

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/metrics"
)

// DeadLetteredLog is the message every read path logs, at error level, once
// for each row it moved to the dead letters, with the reason as the error
// and the fields event_id, row_id, relay, path, topic, event_name,
// aggregate_type, aggregate_id and attempts. relay names the relay: the
// fast path's member name (RelayID/instance/n), the WAL path's slot, the
// compatible path's consumer group.
const DeadLetteredLog = "Outbox row sent to the dead letters"

// DeadLettered counts (m, nil for none) and logs that r went to the dead
// letters as d decided, on path (the relay's Path). The metric alone left an operator with a count
// and no event id nor reason; both come after the move, so a move that
// failed and is tried again counts and logs once.
func DeadLettered(m *metrics.Metrics, l watermill.LoggerAdapter, path, relay string, r *Row, d Decision) {
	m.DeadLettered(d.Class)
	l.Error(DeadLetteredLog, errors.New(d.Reason), watermill.LogFields{
		"event_id": r.EventID.String(), "row_id": r.ID, "relay": relay, "path": path,
		"topic": r.Topic, "event_name": r.Name, "aggregate_type": r.AggregateType,
		"aggregate_id": r.AggregateID, "attempts": d.Attempts})
}
