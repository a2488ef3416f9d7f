package outboxdb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// TestStatementsGolden holds every defined statement, rendered for the
// default table names, to its file under testdata/statements; a file with
// no statement left is refused too, so that the files are the whole list.
func TestStatementsGolden(t *testing.T) {
	tables := outboxdb.New("", "")
	dir := filepath.Join("testdata", "statements")
	want := map[string]bool{}
	for _, s := range outboxdb.Statements() {
		for _, d := range s.Dialects() {
			name := s.Golden(d)
			want[filepath.FromSlash(name)] = true
			tables.Dialect = d
			golden(t, filepath.Join("statements", name), "-- "+s.Name()+"\n"+strings.TrimSpace(s.SQL(tables))+"\n")
		}
	}
	if *update {
		return
	}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		require.True(t, want[rel], "%s holds no defined statement: delete it or define it", path)
		return nil
	})
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}
}

// defined is the statement named name; the test fails when there is none.
func defined(t *testing.T, name string) *outboxdb.Statement {
	t.Helper()
	for _, s := range outboxdb.Statements() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no statement %q is defined", name)
	return nil
}
