package outboxdb

import (
	"strconv"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Reasons carry what differs from one letter to the next (an order's id,
// an event's UUID, a count, the value a decoder choked on): grouped by
// their exact text, a reason shared by hundreds of letters splits into
// hundreds of groups and drowns the others. A reason's pattern replaces
// those parts by placeholders, in this order:
//
//   - a quoted value ("...", '...' after no letter, `...`) by "…", '…' or
//     `…`, whatever it holds;
//   - a UUID by <uuid>;
//   - an id, 0x and hex digits, a word of 8 or more hex digits with a
//     digit and a letter, or a word of 16 or more letters and digits with
//     both (ch_3MtwBwLkdIwHu7ix28a3tqPa), by <id>;
//   - a number after no letter or digit (7731, 30 in 30s, 12.50, 7731 in
//     order_7731; not the 2 of v2 or the 56 of sha256) by <n>.
var reasonPatterns = []struct{ re, with string }{
	{`"(?:[^"\\]|\\.)*"`, `"…"`},
	{`(?<![[:alnum:]])'(?:[^'\\]|\\.)*'`, `'…'`},
	{"`[^`]*`", "`…`"},
	{`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`, `<uuid>`},
	{`0x[0-9a-fA-F]+`, `<id>`},
	{`(?<![[:alnum:]])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])`, `<id>`},
	{`(?<![[:alnum:]])(?=[[:alnum:]]*[0-9])(?=[[:alnum:]]*[[:alpha:]])[[:alnum:]]{16,}(?![[:alnum:]])`, `<id>`},
	{`(?<![[:alnum:]])[0-9]+(?:\.[0-9]+)?`, `<n>`},
}

// maxReasonLength bounds how much of a reason its pattern is made of: a
// stack trace of megabytes is told apart by its start.
const maxReasonLength = 1000

// ReasonPattern is the SQL expression of the pattern of the reason expr
// (an SQL text expression): its first maxReasonLength characters, with
// ids, numbers and quoted values replaced by placeholders (see
// reasonPatterns).
func ReasonPattern(expr string) string {
	e := "left(" + expr + ", " + strconv.Itoa(maxReasonLength) + ")"
	for _, p := range reasonPatterns {
		e = "regexp_replace(" + e + ", " + pgsql.QuoteLiteral(p.re) + ", " + pgsql.QuoteLiteral(p.with) + ", 'g')"
	}
	return e
}
