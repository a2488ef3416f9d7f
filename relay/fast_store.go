package relay

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/outbox"
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
	readableFrom  int   // 0 when only consumers of version read it
	aggregateSeq  int64 // the row's aggregate_seq; 0 when NULL
	createdAt     time.Time
	attempts      int
	partition     int
	size          int64 // bytes of payload and headers, as MaxBytesInFlight counts them
	// wait is how long until the row may be tried again (a retry backs
	// off); zero when it is due.
	wait time.Duration

	decodedHeaders map[string]string // set once the row is checked
}

// aggregate identifies an ordering key.
type aggregate struct{ typ, id string }

func (r *row) aggregate() aggregate { return aggregate{r.aggregateType, r.aggregateID} }

// store runs the fast path's SQL.
//
// The aggregates are spread over a fixed number of partitions by a hash of
// their key, computed by PostgreSQL. Each partition belongs to at most one
// subscription of a topic at a time, under a lease kept in
// <table>_partitions; the subscriptions alive are in <table>_relays, so
// that each can take its fair share. Owning whole partitions makes a claim
// one ordered index scan, with no lock and no write: an aggregate's rows
// can only be read by the owner of its partition.
type store struct {
	db         *sql.DB
	cfg        SubscriberConfig
	partitions string
	members    string
	// ownerLock serialises the changes of ownership of every relay on the
	// table, so that two never take one partition.
	ownerLock int64
	initMu    sync.Mutex
	initDone  bool
	checked   bool // the table is an outbox table
	// claims is the claim statement of every shape (see claimShape).
	claims map[claimShape]claimSQL
}

func newStore(db *sql.DB, cfg SubscriberConfig) *store {
	h := fnv.New64a()
	_, _ = h.Write([]byte("entoutbox partitions " + cfg.Table))
	t := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	return &store{db: db, cfg: cfg, partitions: t.Partitions(), members: t.Relays(), ownerLock: int64(h.Sum64() >> 1),
		claims: claimStatements(cfg.Table, cfg.Partitions)}
}

// partitionExpr is the partition of an outbox row: the same for every row
// of an aggregate, and the same on every relay since PostgreSQL computes it.
func partitionExpr(alias string, partitions int) string {
	return fmt.Sprintf("abs(hashtext(%[1]s.aggregate_type || ':' || %[1]s.aggregate_id) %% %d)::int", alias, partitions)
}

// check refuses a table that is not an outbox table, once.
func (s *store) check(ctx context.Context) error {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.checked {
		return nil
	}
	err := checkTables(ctx, s.db, s.cfg.Table, s.cfg.DeadLetterTable)
	s.checked = err == nil
	return err
}

// init creates the ownership tables, under the lock so that relays
// starting together do not race on them. A failure is tried again later.
func (s *store) init(ctx context.Context) error {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.initDone {
		return nil
	}
	err := s.inOwnerLock(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgsql.QuoteIdent(s.partitions)+` (
				topic text NOT NULL, -- '' for the subscriptions to every topic
				partition int NOT NULL,
				relay text NOT NULL DEFAULT '', -- '' while nobody owns it
				until timestamptz NOT NULL DEFAULT '-infinity',
				PRIMARY KEY (topic, partition));
			CREATE TABLE IF NOT EXISTS `+pgsql.QuoteIdent(s.members)+` (
				topic text NOT NULL,
				relay text NOT NULL,
				until timestamptz NOT NULL,
				PRIMARY KEY (topic, relay));
			-- Members that hold a liveness lock (see liveness): the others
			-- (relays of earlier versions) are only ever taken over by lease.
			ALTER TABLE `+pgsql.QuoteIdent(s.members)+` ADD COLUMN IF NOT EXISTS live_lock boolean NOT NULL DEFAULT false`)
		return err
	})
	s.initDone = err == nil
	return err
}

// ownerIdleLimit is how long a rebalance transaction may sit idle, holding
// the ownership lock, before PostgreSQL ends its session. Its statements
// follow one another at once; only a frozen relay comes near it.
const ownerIdleLimit = time.Second

func (s *store) inOwnerLock(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Every relay of the table waits on this lock: a relay frozen inside
	// the transaction (paused, stalled, cut off) must not hold it for long,
	// or the others could not renew their leases either. PostgreSQL ends
	// such a session after ownerIdleLimit.
	if _, err := tx.ExecContext(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true),
		pg_advisory_xact_lock($2)`, strconv.Itoa(int(ownerIdleLimit.Milliseconds())), s.ownerLock); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ownership is what a rebalance leaves a subscription with.
type ownership struct {
	owned   []int // partitions leased to it, renewed
	fair    int   // its share: how many it may own at most
	members int   // subscriptions in the group, itself included
	// takenOver is the holders found dead (their session gone) whose
	// partitions were freed.
	takenOver []string
	// waitingOn is, when it owns less than its share, who holds the
	// partitions it waits for.
	waitingOn []heldBy
}

// heldBy is partitions held by another subscription.
type heldBy struct {
	relay      string
	partitions int
	until      time.Time // when its lease ends, unless renewed
	live       bool      // its session holds its liveness lock
}

// rebalance keeps holder alive as a member of topic's group, gives back
// the partitions in release (drained by the caller), renews the leases of
// the others it owns and takes free or expired partitions up to its fair
// share. A holder owning more than its share is told so by fair and
// releases the surplus once drained.
func (s *store) rebalance(ctx context.Context, topic, holder string, release []int, dead *deadHolders) (ownership, error) {
	if err := s.init(ctx); err != nil {
		return ownership{}, fmt.Errorf("creating the partition tables: %w", err)
	}
	p, m := pgsql.QuoteIdent(s.partitions), pgsql.QuoteIdent(s.members)
	lease := s.cfg.Lease.Milliseconds()
	var out ownership
	err := s.inOwnerLock(ctx, func(tx *sql.Tx) error {
		var count int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+p+` WHERE topic = $1`, topic).Scan(&count); err != nil {
			return err
		}
		switch count {
		case 0:
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+p+` (topic, partition)
				SELECT $1, g FROM generate_series(0, $2 - 1) g`, topic, s.cfg.Partitions); err != nil {
				return err
			}
		case s.cfg.Partitions:
		default:
			return fmt.Errorf("%s has %d partitions and this relay is set to %d: every relay of a table must use the same number",
				s.partitions, count, s.cfg.Partitions)
		}
		var joined bool
		if err := tx.QueryRowContext(ctx, `INSERT INTO `+m+` (topic, relay, until, live_lock)
			VALUES ($1, $2, now() + $3 * interval '1 millisecond', $4)
			ON CONFLICT (topic, relay) DO UPDATE SET until = excluded.until, live_lock = excluded.live_lock
			RETURNING xmax = 0`, topic, holder, lease, !s.cfg.PollOnly).Scan(&joined); err != nil {
			return err
		}
		expired, err := tx.ExecContext(ctx, `DELETE FROM `+m+` WHERE topic = $1 AND until < now()`, topic)
		if err != nil {
			return err
		}
		// Members whose session is gone give up their partitions and
		// membership once seen so for deadGrace: a relay killed or
		// restarted is replaced within moments, not at the end of its lease.
		deadNow, err := queryStrings(ctx, tx, `SELECT relay FROM `+m+` WHERE topic = $1 AND relay <> $2 AND live_lock
			AND NOT `+outboxdb.LiveHeld(s.cfg.Table, "relay"), topic, holder)
		if err != nil {
			return err
		}
		if gone := dead.confirm(time.Now(), deadNow); len(gone) > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE `+p+` SET relay = '', until = '-infinity'
				WHERE topic = $1 AND relay = ANY($2)`, topic, gone); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+m+` WHERE topic = $1 AND relay = ANY($2)`, topic, gone); err != nil {
				return err
			}
			out.takenOver = gone
		}
		// The others hear of a change at once, not at their next rebalance:
		// a relay joining gets its share, and what is given back is taken.
		if n, _ := expired.RowsAffected(); joined || n > 0 || len(release) > 0 || len(out.takenOver) > 0 {
			if err := s.notifyRebalance(ctx, tx); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+p+` SET relay = '', until = '-infinity'
			WHERE topic = $1 AND relay = $2 AND partition = ANY($3)`, topic, holder, release); err != nil {
			return err
		}
		// A lease still in holder's name is nobody else's, expired or not.
		owned, err := queryInts(ctx, tx, `UPDATE `+p+` SET until = now() + $3 * interval '1 millisecond'
			WHERE topic = $1 AND relay = $2 RETURNING partition`, topic, holder, lease)
		if err != nil {
			return err
		}
		var members int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+m+` WHERE topic = $1`, topic).Scan(&members); err != nil {
			return err
		}
		out.members = max(members, 1)
		out.fair = (s.cfg.Partitions + out.members - 1) / out.members
		if want := out.fair - len(owned); want > 0 {
			taken, err := queryInts(ctx, tx, `UPDATE `+p+` SET relay = $2, until = now() + $3 * interval '1 millisecond'
				WHERE topic = $1 AND partition IN (SELECT partition FROM `+p+`
					WHERE topic = $1 AND (relay = '' OR until < now()) ORDER BY partition LIMIT $4)
				RETURNING partition`, topic, holder, lease, want)
			if err != nil {
				return err
			}
			owned = append(owned, taken...)
		}
		out.owned = owned
		if len(owned) < out.fair {
			rows, err := tx.QueryContext(ctx, `SELECT p.relay, count(*), max(p.until), `+outboxdb.LiveHeld(s.cfg.Table, "p.relay")+`
				FROM `+p+` p WHERE p.topic = $1 AND p.relay NOT IN ('', $2) GROUP BY p.relay ORDER BY p.relay`, topic, holder)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var h heldBy
				if err := rows.Scan(&h.relay, &h.partitions, &h.until, &h.live); err != nil {
					return err
				}
				out.waitingOn = append(out.waitingOn, h)
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

func queryStrings(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func queryInts(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]int, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// leave gives back every partition holder owns and ends its membership.
func (s *store) leave(ctx context.Context, topic, holder string) error {
	return s.inOwnerLock(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE `+pgsql.QuoteIdent(s.partitions)+` SET relay = '', until = '-infinity'
			WHERE topic = $1 AND relay = $2`, topic, holder); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+pgsql.QuoteIdent(s.members)+` WHERE topic = $1 AND relay = $2`, topic, holder); err != nil {
			return err
		}
		return s.notifyRebalance(ctx, tx)
	})
}

// notifyRebalance tells every relay of the table, when tx commits, that
// partitions change hands.
func (s *store) notifyRebalance(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, '')`, rebalanceChannel(s.cfg.Table))
	return err
}

// delivered records rows the broker acknowledged.
func (s *store) delivered(ctx context.Context, ids []int64) error {
	// Acks commit without waiting for the WAL flush: after a database
	// crash the relay at worst delivers again what it had recorded in the
	// last moments, which at-least-once allows. set_config makes this one
	// statement's transaction asynchronous.
	q := `UPDATE ` + pgsql.QuoteIdent(s.cfg.Table) + ` SET delivered_at = now()
		FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	if s.cfg.Delete {
		q = `DELETE FROM ` + pgsql.QuoteIdent(s.cfg.Table) + `
			USING (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	}
	_, err := s.db.ExecContext(ctx, q, ids)
	return err
}

// failed records a failed delivery of r that the failure policy tries
// again (d): its attempts, when it may be tried again and why it failed.
// The rest of its aggregate waits behind it, on this relay and on the next
// owner of its partition.
func (s *store) failed(ctx context.Context, r *row, d decision) error {
	_, err := s.db.ExecContext(ctx, `UPDATE `+pgsql.QuoteIdent(s.cfg.Table)+` SET attempts = attempts + $2,
		available_at = now() + $3 * interval '1 millisecond', last_error = $4 WHERE id = $1`,
		r.id, d.attempts-r.attempts, d.wait.Milliseconds(), d.reason)
	return err
}

// deadLetter moves a row to the dead letters after attempts tries.
func (s *store) deadLetter(ctx context.Context, r *row, reason string, attempts int) error {
	if _, err := s.db.ExecContext(ctx, deadLetterQuery(s.cfg.Table, s.cfg.DeadLetterTable), r.id, reason, attempts); err != nil {
		return fmt.Errorf("relay: moving row %d to %s: %w", r.id, s.cfg.DeadLetterTable, err)
	}
	return nil
}

// decodeRowHeaders reads the headers of r and checks the row can become a
// message at all.
func decodeRowHeaders(r *row) (map[string]string, error) {
	h, err := outbox.DecodeHeaders(r.headers)
	if err != nil {
		return nil, err
	}
	if err := checkRow(r.name, r.topic, r.aggregateID); err != nil {
		return nil, err
	}
	return h, nil
}
