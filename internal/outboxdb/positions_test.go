package outboxdb_test

import (
	"testing"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// TestRecordRunQueryGolden holds the consumers' rule of order (apply an
// aggregate's events that continue its position, without a gap) to its
// committed text, with positions and without (a consumer that does not
// keep order only dedupes).
func TestRecordRunQueryGolden(t *testing.T) {
	tables := outboxdb.New("", "")
	golden(t, "record-run.sql", "-- Recording a run of events: the rule of order, dedupe records, positions moved.\n"+
		tables.RecordRunQuery()+"\n")
	unordered := tables
	unordered.Positions = ""
	golden(t, "record-run-unordered.sql", "-- Recording events without positions: dedupe records only.\n"+
		unordered.RecordRunQuery()+"\n")
}

// TestOrderQueriesGolden holds each of the consumers' statements on their
// positions and dedupe records to its committed text (testdata/order/).
func TestOrderQueriesGolden(t *testing.T) {
	tables := outboxdb.New("", "")
	for name, q := range map[string]string{
		"record-processed": tables.RecordProcessedQuery(),
		"record-delivery":  tables.RecordDeliveryQuery(),
		"record-retried":   tables.RecordRetriedQuery(),
		"lock-position":    tables.LockPositionQuery(),
		"apply":            tables.ApplyQuery(),
		"move":             tables.MoveQuery(),
		"hold":             tables.HoldQuery(),
		"note-waiting":     tables.NoteWaitingQuery(),
		"start-aggregate":  tables.StartAggregateQuery(),
		"position":         tables.PositionQuery(),
		"retried-back":     tables.RetriedBackQuery(),
		"held-at":          tables.HeldAtQuery(),
		"create-members":   tables.CreateMembersQuery(),
		"beat":             tables.BeatQuery(),
		"leave":            tables.LeaveQuery(),
	} {
		golden(t, "order/"+name+".sql", "-- The consumers' "+name+" statement (internal/outboxdb).\n"+q+"\n")
	}
}
