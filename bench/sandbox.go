package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/schema"
)

// sandbox is a fresh PostgreSQL schema holding the test ent tables, so that
// every row starts from an empty outbox and leaves nothing behind.
type sandbox struct {
	name   string // schema name, also the topic prefix stem
	url    string // database URL whose search_path is name
	db     *sql.DB
	client *testent.Client
	admin  *sql.DB
}

func newSandbox(ctx context.Context, e *env) (_ *sandbox, err error) {
	s := &sandbox{name: "bench_" + randomHex(), admin: e.admin}
	if _, err := e.admin.ExecContext(ctx, `CREATE SCHEMA `+pgsql.QuoteIdent(s.name)); err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", s.name, err)
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.url = pgsql.WithSearchPath(e.cfg.DatabaseURL, s.name)
	if s.db, err = sql.Open("pgx", withApplicationName(s.url, benchApplicationName)); err != nil {
		return nil, fmt.Errorf("opening schema %s: %w", s.name, err)
	}
	// Enough for the emitters and the held transactions at once.
	s.db.SetMaxOpenConns(32)
	s.db.SetMaxIdleConns(32)
	s.client = testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, s.db)))
	if err := s.client.Schema.Create(ctx); err != nil {
		return nil, fmt.Errorf("migrating schema %s: %w", s.name, err)
	}
	// The table a held transaction writes to: unrelated to the outbox.
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE bench_other (id bigserial PRIMARY KEY, note text)`); err != nil {
		return nil, fmt.Errorf("creating bench_other in %s: %w", s.name, err)
	}
	return s, nil
}

// close drops the schema, even after the run was interrupted.
func (s *sandbox) close() {
	if s.client != nil {
		s.client.Close() // closes s.db
	} else if s.db != nil {
		s.db.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.dropWAL(ctx)
	_, _ = s.admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+pgsql.QuoteIdent(s.name)+` CASCADE`)
}

// walName is the replication slot and publication of a WAL row: named
// after the sandbox, since both belong to the database, not the schema.
func (s *sandbox) walName() string { return s.name }

// dropWAL drops the WAL row's slot and publication, if any: a slot left
// behind would keep the server's WAL for ever. The relay has stopped; its
// session may take a moment to release the slot.
func (s *sandbox) dropWAL(ctx context.Context) {
	for range 50 {
		var active sql.NullBool
		err := s.admin.QueryRowContext(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, s.walName()).Scan(&active)
		if errors.Is(err, sql.ErrNoRows) || err != nil {
			break
		}
		if !active.Bool {
			_, _ = s.admin.ExecContext(ctx, `SELECT pg_drop_replication_slot($1)`, s.walName())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, _ = s.admin.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+pgsql.QuoteIdent(s.walName()))
}

// retain inserts n rows that are already delivered, as a table that keeps
// its history would hold, with the same payload as the events measured,
// and returns how long the inserts took (the VACUUM ANALYZE after them
// aside). A row of a path that stamps has delivered_at set; with logged
// (a relay with --delivered-log) the rows keep delivered_at NULL and the
// delivered log's floor is put over them, as the relay's floor would have
// moved over them long ago.
//
// The compatible path reads by its consumer group's offset, not by
// delivered_at: a fresh group would start at offset 0 and publish the
// retained rows again. A relay that had been running has its offset past
// them, so when compatibleOffset is set the offset is put there first (the
// table and columns are those of watermill-sql's PostgreSQL offsets
// adapter, under the name relay.newOffsetsAdapter gives it).
func (s *sandbox) retain(ctx context.Context, n, aggregates int, compatibleOffset, logged bool) (time.Duration, error) {
	start := time.Now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("retained rows: %w", err)
	}
	defer tx.Rollback()
	table := pgsql.QuoteIdent(schema.OutboxTable)
	delivered := "now() - interval '1 day'"
	if logged {
		delivered = "NULL"
	}
	if err := insertNumbered(ctx, tx, 0, n, aggregates, "now() - interval '1 day'", delivered); err != nil {
		return 0, fmt.Errorf("inserting %d retained rows: %w", n, err)
	}
	var xid string
	if err := tx.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		return 0, fmt.Errorf("reading the retained rows' transaction: %w", err)
	}
	if compatibleOffset {
		offsets := pgsql.QuoteIdent(outboxdb.New(schema.OutboxTable, "").RelayOffsets())
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+offsets+` (
				consumer_group VARCHAR(255) NOT NULL,
				offset_acked BIGINT,
				last_processed_transaction_id xid8 NOT NULL,
				PRIMARY KEY(consumer_group))`); err != nil {
			return 0, fmt.Errorf("creating the compatible path's offsets table: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+offsets+` (consumer_group, offset_acked, last_processed_transaction_id)
			SELECT 'entoutbox_relay', max(id), pg_current_xact_id() FROM `+table+`
			ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
				last_processed_transaction_id = excluded.last_processed_transaction_id`); err != nil {
			return 0, fmt.Errorf("moving the compatible path's offset past the retained rows: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing %d retained rows: %w", n, err)
	}
	took := time.Since(start)
	// Rows kept for days are older than every transaction still running;
	// these are not while a transaction that began before their insert
	// runs on the server (any database): the relays' reads of late
	// commits, which range over the transactions in progress, would step
	// over them, and VACUUM could not mark their pages all-visible. Wait
	// for the server's oldest transaction to be younger.
	if err := s.waitHorizon(ctx, xid); err != nil {
		return took, err
	}
	if logged {
		// After the commit: the floor's snapshot must see the rows'
		// transaction.
		if err := s.floorOverAll(ctx); err != nil {
			return 0, err
		}
	}
	// Vacuumed, with fresh statistics, as autovacuum would have left a table
	// that accumulated millions of rows over time; otherwise autovacuum
	// would scan the fresh gigabytes during the measurement.
	if _, err := s.db.ExecContext(ctx, `VACUUM ANALYZE `+table); err != nil {
		return took, fmt.Errorf("vacuuming the outbox: %w", err)
	}
	return took, nil
}

// waitHorizon waits until transaction xid is older than every transaction
// in progress on the server, for at most 10 minutes.
func (s *sandbox) waitHorizon(ctx context.Context, xid string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var past bool
		if err := s.db.QueryRowContext(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, xid).Scan(&past); err != nil {
			return fmt.Errorf("reading the oldest transaction in progress: %w", err)
		}
		if past {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a transaction older than the retained rows' still runs after 10 minutes")
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// floorOverAll makes the delivered log's tables, with the relay's own
// statement, if no relay made them yet, and puts the floor over every row
// committed so far: (max(id), the current snapshot).
func (s *sandbox) floorOverAll(ctx context.Context) error {
	t := outboxdb.New(schema.OutboxTable, "")
	if _, err := s.db.ExecContext(ctx, t.FastLog().Create); err != nil {
		return fmt.Errorf("creating the delivered log: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE `+pgsql.QuoteIdent(t.DeliveredFloor())+`
		SET upto = (SELECT coalesce(max(id), 0) FROM `+pgsql.QuoteIdent(t.Outbox)+`), snap = pg_current_snapshot()`); err != nil {
		return fmt.Errorf("putting the delivered log's floor over the retained rows: %w", err)
	}
	return nil
}

// insertNumbered inserts the rows from+1..to of a numbered series in one
// INSERT ... SELECT, with the measured events' payload: row g is of
// aggregate retained-(g mod aggregates), which it numbers after the rows
// before it, created at the SQL expression created, delivered at delivered
// (an expression, NULL for pending). The aggregates' counters are moved
// first, so that the numbering trigger keeps each row's number (a number at
// or below its counter) instead of numbering the rows one by one.
func insertNumbered(ctx context.Context, tx *sql.Tx, from, to, aggregates int, created, delivered string) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	t := outboxdb.New(schema.OutboxTable, "")
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(t.Sequences)+` AS c (topic, aggregate_type, aggregate_id, last_seq)
		SELECT 'profiles', 'Profile', 'retained-' || (g % $2), max((g - 1) / $2 + 1)
		FROM generate_series($1::bigint + 1, $3::bigint) g GROUP BY g % $2
		ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = greatest(c.last_seq, excluded.last_seq)`,
		from, aggregates, to); err != nil {
		return fmt.Errorf("moving the aggregates' counters: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(t.Outbox)+`
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq, payload, created_at, available_at, attempts, delivered_at)
		SELECT gen_random_uuid(), 'profile.updated', 1, 'profiles', 'Profile', 'retained-' || (g % $2), (g - 1) / $2 + 1, $1::jsonb,
			`+created+`, `+created+`, 1, `+delivered+`
		FROM generate_series($3::bigint + 1, $4::bigint) g`, string(body), aggregates, from, to); err != nil {
		return err
	}
	return nil
}

// randomHex is 8 random hex digits, to keep names of concurrent runs apart.
func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitSlot waits until the WAL row's slot exists and has a position.
func (s *sandbox) waitSlot(timeout time.Duration, abort <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for {
		var ready bool
		err := s.admin.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_replication_slots
			WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL)`, s.walName()).Scan(&ready)
		if err != nil {
			return fmt.Errorf("looking for the replication slot: %w", err)
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the WAL relay made no replication slot %s within %s", s.walName(), timeout)
		}
		select {
		case <-abort:
			return errors.New("the WAL relay ended before making its slot")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
