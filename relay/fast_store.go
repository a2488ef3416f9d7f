package relay

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
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

	decodedHeaders map[string]string // set once the row is checked
}

// aggregate identifies an ordering key.
type aggregate struct{ typ, id string }

func (r *row) aggregate() aggregate { return aggregate{r.aggregateType, r.aggregateID} }

// store runs the fast path's SQL. Who holds which aggregate is kept in a
// lease table of the relay's own (<table>_leases): claiming rows never
// rewrites them, so an event costs the outbox one insert and one update
// (or delete) in all.
type store struct {
	db     *sql.DB
	cfg    SubscriberConfig
	leases string
	// claimLock serialises the claims of every relay on the table, so that
	// two replicas never lease one aggregate at the same time.
	claimLock int64
	initMu    sync.Mutex
	initDone  bool
}

func newStore(db *sql.DB, cfg SubscriberConfig) *store {
	h := fnv.New64a()
	_, _ = h.Write([]byte("entoutbox claim " + cfg.Table))
	return &store{db: db, cfg: cfg, leases: cfg.Table + "_leases", claimLock: int64(h.Sum64() >> 1)}
}

// init creates the lease table, under the claim lock so that relays
// starting together do not race on it. A failure is tried again at the
// next claim.
func (s *store) init(ctx context.Context) error {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.initDone {
		return nil
	}
	err := s.inClaimLock(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgsql.QuoteIdent(s.leases)+` (
			aggregate_type text NOT NULL,
			aggregate_id text NOT NULL,
			relay text NOT NULL,
			until timestamptz NOT NULL,
			last_id bigint NOT NULL DEFAULT 0, -- the holder's last row of the aggregate
			PRIMARY KEY (aggregate_type, aggregate_id))`)
		return err
	})
	s.initDone = err == nil
	return err
}

func (s *store) inClaimLock(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Claims and acks commit without waiting for the WAL flush: after a
	// database crash the relay at worst delivers again what it had
	// recorded in the last moments, which at-least-once allows.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1), set_config('synchronous_commit', 'off', true)`, s.claimLock); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// claim takes up to limit undelivered rows of topic ("" for all) with ids
// above after, oldest first, whose aggregates no other relay holds and none
// waits for a retry, and leases their aggregates to holder. A row is not
// taken while an older undelivered row of its aggregate lies below after
// and is not holder's: a scan may start anywhere without reordering. held are rows
// holder has already (none of them above after); release are aggregates it
// no longer needs. Rows of transactions still open are simply not visible
// yet: nothing waits for them.
func (s *store) claim(ctx context.Context, holder, topic string, after int64, limit int, held []int64, release []aggregate) ([]*row, error) {
	if err := s.init(ctx); err != nil {
		return nil, fmt.Errorf("creating the lease table: %w", err)
	}
	t, l := pgsql.QuoteIdent(s.cfg.Table), pgsql.QuoteIdent(s.leases)
	var out []*row
	err := s.inClaimLock(ctx, func(tx *sql.Tx) error {
		relTypes, relIDs := splitAggregates(release)
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+l+` WHERE until < now()
			OR (relay = $1 AND (aggregate_type, aggregate_id) IN (SELECT * FROM unnest($2::text[], $3::text[])))`,
			holder, relTypes, relIDs); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `WITH claimed AS (
				SELECT o.id, o.event_id, o.event_name, o.event_version, o.topic, o.aggregate_type, o.aggregate_id,
					o.payload, o.headers, o.created_at, o.attempts
				FROM `+t+` o
				WHERE o.delivered_at IS NULL AND o.id > $6
					AND ($2 = '' OR o.topic = $2)
					AND o.id <> ALL($4::bigint[])
					AND NOT EXISTS (SELECT 1 FROM `+l+` h WHERE h.aggregate_type = o.aggregate_type
						AND h.aggregate_id = o.aggregate_id AND h.relay <> $1 AND h.until >= now())
					-- Order: a scan that starts after row $6 must not skip an
					-- undelivered row of the aggregate below that start, other
					-- than those this holder took already (up to its last_id).
					AND NOT EXISTS (SELECT 1 FROM `+t+` p WHERE p.aggregate_type = o.aggregate_type
						AND p.aggregate_id = o.aggregate_id AND p.delivered_at IS NULL AND p.id <= $6
						AND p.id > COALESCE((SELECT h.last_id FROM `+l+` h WHERE h.aggregate_type = o.aggregate_type
							AND h.aggregate_id = o.aggregate_id AND h.relay = $1 AND h.until >= now()), 0))
				ORDER BY o.id
				LIMIT $3
			), leased AS (
				INSERT INTO `+l+` (aggregate_type, aggregate_id, relay, until, last_id)
				SELECT aggregate_type, aggregate_id, $1, now() + $5 * interval '1 millisecond', max(id) FROM claimed
				GROUP BY aggregate_type, aggregate_id
				ON CONFLICT (aggregate_type, aggregate_id)
				DO UPDATE SET relay = excluded.relay, until = excluded.until,
					last_id = CASE WHEN `+l+`.relay = excluded.relay
						THEN greatest(`+l+`.last_id, excluded.last_id) ELSE excluded.last_id END
			)
			SELECT * FROM claimed`, holder, topic, limit, held, s.cfg.Lease.Milliseconds(), after)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r := &row{}
			if err := rows.Scan(&r.id, &r.eventID, &r.name, &r.version, &r.topic, &r.aggregateType, &r.aggregateID,
				&r.payload, &r.headers, &r.createdAt, &r.attempts); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *row) int { return int(a.id - b.id) })
	return out, nil
}

// delivered records rows the broker acknowledged.
func (s *store) delivered(ctx context.Context, ids []int64) error {
	// set_config makes this one statement commit asynchronously, as claims do.
	q := `UPDATE ` + pgsql.QuoteIdent(s.cfg.Table) + ` SET delivered_at = now()
		FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	if s.cfg.Delete {
		q = `DELETE FROM ` + pgsql.QuoteIdent(s.cfg.Table) + `
			USING (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	}
	_, err := s.db.ExecContext(ctx, q, ids)
	return err
}

// Every write to the lease table happens under the claim lock: lease rows
// are then never locked in two orders at once, so relays cannot deadlock.

// releaseAll gives back every aggregate holder leases.
func (s *store) releaseAll(ctx context.Context, holder string) error {
	return s.inClaimLock(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM `+pgsql.QuoteIdent(s.leases)+` WHERE relay = $1`, holder)
		return err
	})
}

// renew extends holder's leases.
func (s *store) renew(ctx context.Context, holder string) error {
	return s.inClaimLock(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE `+pgsql.QuoteIdent(s.leases)+` SET until = now() + $2 * interval '1 millisecond'
			WHERE relay = $1`, holder, s.cfg.Lease.Milliseconds())
		return err
	})
}

// failed records a failed delivery and blocks r's aggregate, for every
// relay, until the retry: the rest of the aggregate waits behind r.
func (s *store) failed(ctx context.Context, r *row, countAttempt bool, reason string) error {
	n := 0
	if countAttempt {
		n = 1
	}
	wait := s.cfg.backoff(max(r.attempts+n, 1))
	return s.inClaimLock(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE `+pgsql.QuoteIdent(s.cfg.Table)+` SET attempts = attempts + $2,
			available_at = now() + $3 * interval '1 millisecond', last_error = $4 WHERE id = $1`,
			r.id, n, wait.Milliseconds(), reason); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(s.leases)+` (aggregate_type, aggregate_id, relay, until)
			VALUES ($1, $2, '', now() + $3 * interval '1 millisecond')
			ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET relay = excluded.relay, until = excluded.until`,
			r.aggregateType, r.aggregateID, wait.Milliseconds())
		return err
	})
}

// deadLetter moves a row to the dead letters after attempts tries.
func (s *store) deadLetter(ctx context.Context, r *row, reason string, attempts int) error {
	if _, err := s.db.ExecContext(ctx, deadLetterQuery(s.cfg.Table, s.cfg.DeadLetterTable), r.id, reason, attempts); err != nil {
		return fmt.Errorf("relay: moving row %d to %s: %w", r.id, s.cfg.DeadLetterTable, err)
	}
	return nil
}

func splitAggregates(aggs []aggregate) (types, ids []string) {
	types, ids = make([]string, len(aggs)), make([]string, len(aggs))
	for i, a := range aggs {
		types[i], ids[i] = a.typ, a.id
	}
	return types, ids
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
