package outboxdb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// TestOrderQueriesDefined holds each of the consumers' statements on their
// positions and dedupe records, as the consumer package reads them, to
// the named statement TestStatementsGolden holds to its file.
func TestOrderQueriesDefined(t *testing.T) {
	tables := outboxdb.New("", "")
	unordered := tables
	unordered.Positions = ""
	for name, q := range map[string]string{
		"order/record-run":           tables.RecordRunQuery(),
		"order/record-run-unordered": unordered.RecordRunQuery(),
		"order/record-processed":     tables.RecordProcessedQuery(),
		"order/record-delivery":      tables.RecordDeliveryQuery(),
		"order/record-retried":       tables.RecordRetriedQuery(),
		"order/lock-position":        tables.LockPositionQuery(),
		"order/apply":                tables.ApplyQuery(),
		"order/move":                 tables.MoveQuery(),
		"order/hold":                 tables.HoldQuery(),
		"order/note-waiting":         tables.NoteWaitingQuery(),
		"order/start-aggregate":      tables.StartAggregateQuery(),
		"order/position":             tables.PositionQuery(),
		"order/retried-back":         tables.RetriedBackQuery(),
		"order/held-at":              tables.HeldAtQuery(),
		"order/create-members":       tables.CreateMembersQuery(),
		"order/beat":                 tables.BeatQuery(),
		"order/leave":                tables.LeaveQuery(),
		"settle/settle":              tables.SettleQuery(),
		"numbering/install":          tables.NumberingQuery(),
	} {
		require.Equal(t, defined(t, name).SQL(tables), q, name)
	}
}
