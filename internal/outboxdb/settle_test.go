package outboxdb_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// TestSettleQueryGolden holds the statement that settles a position after
// a repair to its committed text: a change to it is seen in review.
// go test ./internal/outboxdb -run TestSettleQueryGolden -update rewrites it.
func TestSettleQueryGolden(t *testing.T) {
	got := "-- Settling a consumer's position after a repair of its dead letters.\n" + outboxdb.New("", "").SettleQuery() + "\n"
	path := filepath.Join("testdata", "settle.sql")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file %s: run with -update", path)
	require.Equal(t, string(want), got, "the statement differs from %s: run with -update if the change is meant", path)
}
