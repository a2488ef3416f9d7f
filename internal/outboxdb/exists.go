package outboxdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Querier is what every read takes: a *sql.DB, a *sql.Tx, or an ent
// client or transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRow scans the one row of query into dst; sql.ErrNoRows when it
// returns none. (QueryRowContext is not part of Querier: ent's clients
// lack it.)
func queryRow(ctx context.Context, q Querier, query string, args []any, dst ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dst...); err != nil {
		return err
	}
	return rows.Close()
}

// The catalog reads: they name a table by parameter, not by Tables.
var (
	// existsTable tells whether table $1 (quoted) exists.
	existsTable = define("exists/table", func(Tables) string {
		return `SELECT to_regclass($1) IS NOT NULL`
	}).also(SQLite, func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)`
	})
	// existsColumn tells whether table $1 (quoted) has column $2.
	existsColumn = define("exists/column", func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)
		AND attname = $2 AND attnum > 0 AND NOT attisdropped)`
	})
	// existsMissingColumns tells whether table $1 (quoted) exists and
	// which of columns $2 (joined by commas) it lacks, joined by ", ".
	existsMissingColumns = define("exists/missing-columns", func(Tables) string {
		return `SELECT to_regclass($1) IS NOT NULL, array_to_string(ARRAY(
			SELECT c FROM unnest(string_to_array($2, ',')) c WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
				WHERE a.attrelid = to_regclass($1) AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped)), ', ')`
	}).also(SQLite, func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1), COALESCE((
			SELECT group_concat(c.value, ', ') FROM json_each('["' || replace(?2, ',', '","') || '"]') c
			WHERE c.value NOT IN (SELECT name FROM pragma_table_info(?1))), '')`
	})
)

// MigrateHint is what to run when a table is missing, as the relay and
// the consumers say it when they refuse to start.
const MigrateHint = "run the ent migration first: client.Schema.Create"

// TableExists tells whether table name exists (on the search path).
func TableExists(ctx context.Context, q Querier, name string) (bool, error) {
	return Tables{}.TableExists(ctx, q, name)
}

// TableExists tells whether table name exists in t's database.
func (t Tables) TableExists(ctx context.Context, q Querier, name string) (bool, error) {
	var exists bool
	if err := queryRow(ctx, t.bound(q), existsTable.SQL(t), []any{t.catalogName(name)}, &exists); err != nil {
		return false, fmt.Errorf("looking for table %q: %w", name, err)
	}
	return exists, nil
}

// ColumnExists tells whether table has column; false when there is no
// such table.
func ColumnExists(ctx context.Context, q Querier, table, column string) (bool, error) {
	var exists bool
	if err := queryRow(ctx, q, existsColumn.SQL(Tables{}), []any{pgsql.QuoteIdent(table), column}, &exists); err != nil {
		return false, fmt.Errorf("looking for column %s of table %q: %w", column, table, err)
	}
	return exists, nil
}

// columnExists tells whether table has column in t's database, q bound
// already (Tables.bound); false when there is no such table.
func (t Tables) columnExists(ctx context.Context, q Querier, table, column string) (bool, error) {
	var exists bool
	if err := queryRow(ctx, q, existsColumn.SQL(t), []any{t.catalogName(table), column}, &exists); err != nil {
		return false, fmt.Errorf("looking for column %s of table %q: %w", column, table, err)
	}
	return exists, nil
}

// TableExistsQuery tells whether the table named by its one argument
// (TableArg) exists, in t's dialect.
func (t Tables) TableExistsQuery() string { return existsTable.SQL(t) }

// TableArg is table as TableExistsQuery takes it.
func (t Tables) TableArg(table string) string { return t.catalogName(table) }

// catalogName is table as the catalog reads take it: quoted for
// PostgreSQL's to_regclass, as it is for SQLite's and MySQL's catalogs.
func (t Tables) catalogName(table string) string {
	if t.Dialect != Postgres {
		return table
	}
	return pgsql.QuoteIdent(table)
}

// missingColumns tells whether table exists and which of columns it lacks.
func (t Tables) missingColumns(ctx context.Context, q Querier, table string, columns []string) (exists bool, missing string, err error) {
	if err := queryRow(ctx, t.bound(q), existsMissingColumns.SQL(t), []any{t.catalogName(table), strings.Join(columns, ",")}, &exists, &missing); err != nil {
		return false, "", fmt.Errorf("looking for table %q: %w", table, err)
	}
	return exists, missing, nil
}

// outboxColumns are the columns of the outbox table the relay reads or
// writes.
var outboxColumns = []string{"id", "event_id", "event_name", "event_version", "topic", "aggregate_type", "aggregate_id",
	"payload", "headers", "created_at", "transaction_id", "available_at", "attempts", "delivered_at", "last_error",
	"readable_from", "aggregate_seq"}

// deadLetterColumns are the columns of the dead-letter table the relay
// writes beyond those it always had: a dead letter keeps the row's place
// in its aggregate's order, so that a retry takes it again.
var deadLetterColumns = []string{"aggregate_seq"}

// Check refuses an outbox table that does not exist or is not one, and a
// dead-letter table that does not exist or lacks a column the relay
// writes, saying what to run.
func (t Tables) Check(ctx context.Context, q Querier) error {
	const migrate = MigrateHint
	exists, missing, err := t.missingColumns(ctx, q, t.Outbox, outboxColumns)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("table %q does not exist (%s)", t.Outbox, migrate)
	}
	if missing != "" {
		return fmt.Errorf("table %q is not an outbox table: it lacks the columns %s (%s)", t.Outbox, missing, migrate)
	}
	exists, missing, err = t.missingColumns(ctx, q, t.DeadLetters, deadLetterColumns)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("dead-letter table %q does not exist (%s)", t.DeadLetters, migrate)
	}
	if missing != "" {
		return fmt.Errorf("dead-letter table %q lacks the columns %s (%s)", t.DeadLetters, missing, migrate)
	}
	return nil
}
