package outboxdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// The relay fleet's own tables (package relay/fleet), on PostgreSQL: its
// processes' heartbeats, and the registry of tenants an operator keeps.
// Neither is an outbox's table; their statements are here with the rest.

// FleetMembersTable is the table of a fleet's processes: one row each,
// its heartbeat renewed while it runs.
const FleetMembersTable = "entoutbox_fleet_members"

// JoinFleet makes the members table when it is missing and forgets the
// members gone for a day. The transaction's advisory lock orders the
// processes that start at once: CREATE TABLE IF NOT EXISTS alone races
// (a unique violation in pg_type).
func JoinFleet(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, stmt := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('` + FleetMembersTable + `'))`,
		`CREATE TABLE IF NOT EXISTS ` + FleetMembersTable + ` (
	member_id text PRIMARY KEY,
	heartbeat_at timestamptz NOT NULL,
	joined_at timestamptz NOT NULL DEFAULT now())`,
		`DELETE FROM ` + FleetMembersTable + ` WHERE heartbeat_at < now() - interval '1 day'`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("making table %s: %w", FleetMembersTable, err)
		}
	}
	return tx.Commit()
}

// FleetHeartbeat records member id's heartbeat, by the database's clock.
func FleetHeartbeat(ctx context.Context, db Execer, id string) error {
	_, err := db.ExecContext(ctx, `INSERT INTO `+FleetMembersTable+` (member_id, heartbeat_at) VALUES ($1, now())
ON CONFLICT (member_id) DO UPDATE SET heartbeat_at = now()`, id)
	return err
}

// LiveFleetMembers is the members whose heartbeat is younger than
// timeout, by the database's clock, in order of their ids.
func LiveFleetMembers(ctx context.Context, q Querier, timeout time.Duration) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT member_id FROM `+FleetMembersTable+`
WHERE heartbeat_at > now() - make_interval(secs => $1) ORDER BY member_id`, timeout.Seconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var live []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		live = append(live, id)
	}
	return live, rows.Err()
}

// LeaveFleet removes member id.
func LeaveFleet(ctx context.Context, db Execer, id string) error {
	_, err := db.ExecContext(ctx, `DELETE FROM `+FleetMembersTable+` WHERE member_id = $1`, id)
	return err
}

// RegistryTableDDL makes a registry table named table: one row per
// tenant.
func RegistryTableDDL(table string) string {
	return `CREATE TABLE ` + table + ` (
	name text PRIMARY KEY,
	database_url text NOT NULL,
	schema text NOT NULL DEFAULT ''
)`
}

// RegistryRow is one tenant of a registry table.
type RegistryRow struct {
	Name, DatabaseURL, Schema string
}

// ReadRegistry reads the rows of the registry table (schema.table or
// table, unquoted names) in the order of their names; a missing table's
// error says how to make it.
func ReadRegistry(ctx context.Context, q Querier, table string) ([]RegistryRow, error) {
	parts := strings.Split(table, ".")
	for i, p := range parts {
		parts[i] = pgsql.QuoteIdent(p)
	}
	rows, err := q.QueryContext(ctx, `SELECT name, database_url, schema FROM `+strings.Join(parts, ".")+` ORDER BY name`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return nil, fmt.Errorf("%w; make it with:\n%s", err, RegistryTableDDL(table))
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RegistryRow
	for rows.Next() {
		var r RegistryRow
		if err := rows.Scan(&r.Name, &r.DatabaseURL, &r.Schema); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
