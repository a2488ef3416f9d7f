package outboxdb_test

import (
	"testing"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// TestSettleQueryGolden holds the statement that settles a position after
// a repair to its committed text.
func TestSettleQueryGolden(t *testing.T) {
	golden(t, "settle.sql", "-- Settling a consumer's position after a repair of its dead letters.\n"+
		outboxdb.New("", "").SettleQuery()+"\n")
}
