package outbox

import (
	"context"
	stdsql "database/sql"
	"fmt"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Migrate installs what ent's migration cannot make and the outbox
// needs: when t has a Sequence table, a trigger (BEFORE INSERT on the
// outbox table) that numbers every row written without Emit (a migration,
// a backfill, another service's plain INSERT) as Emit numbers its own, from
// the same counters under the same lock, and refuses a number set by hand
// that is not the aggregate's next one (see docs/consumer-order.md). An
// Emit's rows, numbered already, cost it one read of the counter.
//
// The generated migrate.Create calls it after ent's migration, so
// client.Schema.Create installs it, and Schema.WriteTo prints it. It is
// safe to run on every start: it changes nothing when the trigger is in
// place, and nothing when a table is missing. PostgreSQL only: on another
// dialect it does nothing.
func Migrate(ctx context.Context, drv dialect.ExecQuerier, t Tables) error {
	if t.Sequence == "" || !postgres(drv) {
		return nil
	}
	var res stdsql.Result
	q := outboxdb.Tables{Outbox: t.Outbox, Sequences: t.Sequence}.NumberingQuery()
	if err := drv.Exec(ctx, q, []any{}, &res); err != nil {
		return fmt.Errorf("outbox: installing the trigger that numbers the rows of %s written without Emit: %w", t.Outbox, err)
	}
	return nil
}

// postgres tells whether drv speaks PostgreSQL; true when it does not say.
func postgres(drv dialect.ExecQuerier) bool {
	d, ok := drv.(interface{ Dialect() string })
	return !ok || d.Dialect() == dialect.Postgres
}
