package outboxdb_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// MySQL reads each ? in order: numbered parameters become positional,
// their arguments repeated as often as they are used; a ? in a string or
// an identifier is left alone, and other dialects keep the text.
func TestBindNumbersParametersForMySQL(t *testing.T) {
	q, args := outboxdb.Bind(outboxdb.MySQL, "SELECT ?2, '?1', `a?3`, ?1 + ?2 FROM t WHERE x = ?10", []any{"a", "b", 3, 4, 5, 6, 7, 8, 9, "j"})
	require.Equal(t, "SELECT ?, '?1', `a?3`, ? + ? FROM t WHERE x = ?", q)
	require.Equal(t, []any{"b", "a", "b", "j"}, args)

	q, args = outboxdb.Bind(outboxdb.SQLite, "SELECT ?2, ?1", []any{1, 2})
	require.Equal(t, "SELECT ?2, ?1", q)
	require.Equal(t, []any{1, 2}, args)

	q, args = outboxdb.Bind(outboxdb.MySQL, "INSERT INTO t VALUES (?, ?)", []any{1, 2})
	require.Equal(t, "INSERT INTO t VALUES (?, ?)", q)
	require.Equal(t, []any{1, 2}, args)
}
