package outboxdb_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// golden holds got, a statement under a comment line, to the committed
// text of testdata/name: a change to a statement is seen in review.
// go test ./internal/outboxdb -update rewrites the files from the code.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file %s: run with -update", path)
	require.Equal(t, string(want), got, "the statement differs from %s: run with -update if the change is meant", path)
}
