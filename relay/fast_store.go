package relay

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/google/uuid"
)

// row is a claimed outbox row.
type row struct {
	id            int64
	eventID       uuid.UUID
	name          string
	version       int
	topic         string
	aggregateType string
	aggregateID   string
	payload       []byte
	headers       []byte
	createdAt     time.Time
	attempts      int
}

// store runs the fast path's SQL.
type store struct {
	db  *sql.DB
	cfg SubscriberConfig
	// claimLock serialises the claims of every relay on the table, so that
	// two replicas never take rows of one aggregate at the same time.
	claimLock int64
}

func newStore(db *sql.DB, cfg SubscriberConfig) *store {
	h := fnv.New64a()
	_, _ = h.Write([]byte("entoutbox claim " + cfg.Table))
	return &store{db: db, cfg: cfg, claimLock: int64(h.Sum64() >> 1)}
}

// claim leases up to limit rows of topic ("" for all), oldest first. A row
// is only taken when no earlier undelivered row of its aggregate is leased
// (by any relay) or waiting to be retried: that is what keeps each
// aggregate in order across replicas and failures. Rows of transactions
// still open are simply not visible yet; nothing waits for them.
func (s *store) claim(ctx context.Context, topic string, limit int) ([]*row, error) {
	t := quoteIdent(s.cfg.Table)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, s.claimLock); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `UPDATE `+t+` SET claimed_until = now() + $1 * interval '1 millisecond', claimed_by = $2
		WHERE id IN (
			SELECT o.id FROM `+t+` o
			WHERE o.delivered_at IS NULL AND o.available_at <= now()
				AND (o.claimed_until IS NULL OR o.claimed_until < now())
				AND ($3 = '' OR o.topic = $3)
				AND NOT EXISTS (
					SELECT 1 FROM `+t+` p
					WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
						AND p.id < o.id AND p.delivered_at IS NULL
						AND (p.claimed_until >= now() OR p.available_at > now()))
			ORDER BY o.id
			LIMIT $4
			FOR UPDATE SKIP LOCKED)
		RETURNING id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, headers, created_at, attempts`,
		s.cfg.Lease.Milliseconds(), s.cfg.RelayID, topic, limit)
	if err != nil {
		return nil, err
	}
	var out []*row
	for rows.Next() {
		r := &row{}
		if err := rows.Scan(&r.id, &r.eventID, &r.name, &r.version, &r.topic, &r.aggregateType, &r.aggregateID,
			&r.payload, &r.headers, &r.createdAt, &r.attempts); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *row) int { return int(a.id - b.id) })
	return out, nil
}

// delivered records rows the broker acknowledged.
func (s *store) delivered(ctx context.Context, ids []int64) error {
	q := `UPDATE ` + quoteIdent(s.cfg.Table) + ` SET delivered_at = now(), claimed_until = NULL WHERE id = ANY($1)`
	if s.cfg.Delete {
		q = `DELETE FROM ` + quoteIdent(s.cfg.Table) + ` WHERE id = ANY($1)`
	}
	_, err := s.db.ExecContext(ctx, q, ids)
	return err
}

// release gives rows back without counting an attempt.
func (s *store) release(ctx context.Context, ids []int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE `+quoteIdent(s.cfg.Table)+` SET claimed_until = NULL
		WHERE id = ANY($1) AND claimed_by = $2 AND delivered_at IS NULL`, ids, s.cfg.RelayID)
	return err
}

// renew extends the leases of rows still held.
func (s *store) renew(ctx context.Context, ids []int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE `+quoteIdent(s.cfg.Table)+` SET claimed_until = now() + $2 * interval '1 millisecond'
		WHERE id = ANY($1) AND claimed_by = $3 AND delivered_at IS NULL`, ids, s.cfg.Lease.Milliseconds(), s.cfg.RelayID)
	return err
}

// failed records a failed delivery: the row waits for its backoff, and the
// rest of its aggregate waits behind it.
func (s *store) failed(ctx context.Context, r *row, countAttempt bool, reason string) error {
	n := 0
	if countAttempt {
		n = 1
	}
	wait := s.cfg.backoff(max(r.attempts+n, 1))
	_, err := s.db.ExecContext(ctx, `UPDATE `+quoteIdent(s.cfg.Table)+` SET attempts = attempts + $2,
		available_at = now() + $3 * interval '1 millisecond', claimed_until = NULL, last_error = $4 WHERE id = $1`,
		r.id, n, wait.Milliseconds(), reason)
	return err
}

// deadLetter moves a row to the dead letters.
func (s *store) deadLetter(ctx context.Context, r *row, reason string) error {
	if _, err := s.db.ExecContext(ctx, deadLetterQuery(s.cfg.Table, s.cfg.DeadLetterTable), r.id, reason); err != nil {
		return fmt.Errorf("relay: moving row %d to %s: %w", r.id, s.cfg.DeadLetterTable, err)
	}
	return nil
}

// decodeRowHeaders reads the headers of r and checks the row can become a
// message at all.
func decodeRowHeaders(r *row) (map[string]string, error) {
	h, err := decodeHeaders(r.headers)
	if err != nil {
		return nil, err
	}
	if err := checkRow(r.name, r.topic, r.aggregateID); err != nil {
		return nil, err
	}
	return h, nil
}
