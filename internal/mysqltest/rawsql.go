package mysqltest

import (
	"fmt"
	"regexp"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// The tests that write rows by hand on PostgreSQL and MySQL from the same
// code write their SQL as for PostgreSQL: parameters $1, $2…, and the
// database's clock through ClockAt.

var dollarParam = regexp.MustCompile(`\$(\d+)`)

// Rebind is query, its parameters written $1, $2… as on PostgreSQL, and
// args, bound the way MySQL reads them when mysql is set.
func Rebind(mysql bool, query string, args []any) (string, []any) {
	if !mysql {
		return query, args
	}
	return outboxdb.Bind(outboxdb.MySQL, dollarParam.ReplaceAllString(query, "?$1"), args)
}

// ClockAt is the database's clock shifted by offset (negative: ago), in
// SQL: MySQL's when mysql is set, else PostgreSQL's.
func ClockAt(mysql bool, offset time.Duration) string {
	if mysql {
		return fmt.Sprintf("(UTC_TIMESTAMP(6) + INTERVAL %d MICROSECOND)", offset.Microseconds())
	}
	return fmt.Sprintf("(clock_timestamp() + make_interval(secs => %f))", float64(offset.Microseconds())/1e6)
}
