package relay

import (
	"errors"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/metrics"
)

// deadLetteredLog is the message every read path logs, at error level, once
// for each row it moved to the dead letters, with the reason as the error
// and the fields event_id, row_id, relay, path, topic, event_name,
// aggregate_type, aggregate_id and attempts. relay names the relay: the
// fast path's member name (RelayID/instance/n), the WAL path's slot, the
// compatible path's consumer group.
const deadLetteredLog = "Outbox row sent to the dead letters"

// deadLettered counts (m, nil for none) and logs that r went to the dead
// letters as d decided. The metric alone left an operator with a count
// and no event id nor reason; both come after the move, so a move that
// failed and is tried again counts and logs once.
func deadLettered(m *metrics.Metrics, l watermill.LoggerAdapter, path Path, relay string, r *row, d decision) {
	m.DeadLettered(d.class)
	l.Error(deadLetteredLog, errors.New(d.reason), watermill.LogFields{
		"event_id": r.eventID.String(), "row_id": r.id, "relay": relay, "path": string(path),
		"topic": r.topic, "event_name": r.name, "aggregate_type": r.aggregateType,
		"aggregate_id": r.aggregateID, "attempts": d.attempts})
}

// defaultLogger is the logger of a relay or Subscriber given none: the
// application's slog default, so dead letters and outages are seen
// without configuration. watermill.NopLogger{} silences it.
func defaultLogger() watermill.LoggerAdapter { return watermill.NewSlogLogger(slog.Default()) }
