package relay

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

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
}

func newStore(db *sql.DB, cfg SubscriberConfig) *store {
	h := fnv.New64a()
	_, _ = h.Write([]byte("entoutbox partitions " + cfg.Table))
	t := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	return &store{db: db, cfg: cfg, partitions: t.Partitions(), members: t.Relays(), ownerLock: int64(h.Sum64() >> 1)}
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

// claimQuery is one claim: undelivered rows of topic ("" for every topic)
// in the given partitions (nil for all), with ids above after or written by
// one of the late transactions, not in held and not of an aggregate in
// blocked, oldest first.
type claimQuery struct {
	topic   string
	parts   []int
	after   int64
	late    openTxs
	held    []int64
	blocked []aggregate
	limit   int
	// budget is the most bytes of payload and headers the claim returns;
	// force lets its first row exceed it (nothing else is held).
	budget int64
	force  bool
	// freed is the count of releases of held bytes when the claim began.
	freed uint64
}

// openTxs is the transactions a snapshot saw as in progress: those listed,
// and every one from an id on (PostgreSQL's snapshot xmax: transactions
// from it on may have begun already, but are not listed).
type openTxs struct {
	listed []string // xid8s
	from   string   // xid8; "" for none
}

// merge is the transactions open in a or in b.
func (a openTxs) merge(b openTxs) openTxs {
	if a.from == "" {
		return b
	}
	if b.from == "" {
		return a
	}
	out := openTxs{from: a.from}
	if x, _ := strconv.ParseUint(b.from, 10, 64); x < mustXID(a.from) {
		out.from = b.from
	}
	seen := map[string]bool{}
	for _, x := range slices.Concat(a.listed, b.listed) {
		if !seen[x] {
			seen[x] = true
			out.listed = append(out.listed, x)
		}
	}
	return out
}

func mustXID(s string) uint64 {
	x, _ := strconv.ParseUint(s, 10, 64)
	return x
}

// claimed is what a claim read: its rows, and the transactions in progress
// in its snapshot (zero when it read no row).
type claimed struct {
	rows []*row
	open openTxs
	// cut tells the claim stopped at a row its byte budget had no room
	// for: more rows wait. cutSize is that row's size.
	cut     bool
	cutSize int64
}

// claim reads the rows of q. Rows of transactions still open are simply
// not visible yet: nothing waits for them. The claim also reports which
// transactions were open in its snapshot. A row below the cursor that
// becomes visible later can only be theirs: its id was taken before that of
// a row the claim saw committed, so its transaction had begun. The next
// claims read those transactions' rows below the cursor in the same
// snapshot as the rows above it, so an aggregate's rows come out in id
// order however their transactions' ids interleave.
func (s *store) claim(ctx context.Context, conn *claimConn, q claimQuery) (claimed, error) {
	part := partitionExpr("o", s.cfg.Partitions)
	where := []string{"o.delivered_at IS NULL"}
	args := []any{q.after, q.limit}
	if q.topic != "" {
		args = append(args, q.topic)
		where = append(where, fmt.Sprintf("o.topic = $%d", len(args)))
	}
	if q.parts != nil {
		args = append(args, q.parts)
		where = append(where, fmt.Sprintf("%s = ANY($%d)", part, len(args)))
	}
	// NOT IN over a subquery is hashed: lists of thousands stay cheap.
	if len(q.held) > 0 {
		args = append(args, q.held)
		where = append(where, fmt.Sprintf("o.id NOT IN (SELECT unnest($%d::bigint[]))", len(args)))
	}
	if len(q.blocked) > 0 {
		types, ids := make([]string, len(q.blocked)), make([]string, len(q.blocked))
		for i, a := range q.blocked {
			types[i], ids[i] = a.typ, a.id
		}
		args = append(args, types, ids)
		where = append(where, fmt.Sprintf("(o.aggregate_type, o.aggregate_id) NOT IN (SELECT * FROM unnest($%d::text[], $%d::text[]))",
			len(args)-1, len(args)))
	}
	filter := strings.Join(where, " AND ")
	cols := `o.id, o.event_id, o.event_name, o.event_version, o.topic,
			o.aggregate_type, o.aggregate_id, o.payload::text AS payload, o.headers::text AS headers, o.created_at,
			o.attempts, o.readable_from, o.aggregate_seq, ` + part + ` AS part, greatest(ceil(extract(epoch FROM o.available_at - now()) * 1000), 0)::bigint AS wait_ms`
	table := pgsql.QuoteIdent(s.cfg.Table)
	// Above the cursor: one ordered scan of the pending index. Below it:
	// the rows of the late transactions, through the commit-order index.
	// (The delivered_at test stays outside OFFSET 0 so that the planner
	// cannot scan the pending index below the cursor instead: while a long
	// transaction holds vacuum back, that part of it is full of delivered
	// rows.)
	from := `SELECT ` + cols + ` FROM ` + table + ` o WHERE ` + filter + ` AND o.id > $1 ORDER BY o.id LIMIT $2`
	if q.late.from != "" && q.after > 0 {
		args = append(args, q.late.listed, q.late.from)
		listed, since := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
		from = `(` + from + `) UNION ALL (SELECT ` + cols + ` FROM (SELECT * FROM ` + table + ` o
				WHERE (o.transaction_id = ANY(` + listed + `::text[]::xid8[])
					OR o.transaction_id >= ` + since + `::text::xid8 AND o.transaction_id < pg_snapshot_xmax(pg_current_snapshot()))
				AND o.id <= $1 OFFSET 0) o
			WHERE ` + filter + `)`
	}
	// The byte budget: rows are kept while the running sum of their sizes
	// fits it (the first one also when forced); the first row beyond it
	// comes without its payload, to tell the claim was cut there.
	args = append(args, q.budget, q.force)
	budget, force := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
	sized := `SELECT v.*, v.running <= ` + budget + ` OR v.n = 1 AND ` + force + ` AS kept FROM (
			SELECT u.*, sum(u.size) OVER (ORDER BY u.id) AS running, row_number() OVER (ORDER BY u.id) AS n FROM (
				SELECT t.*, coalesce(octet_length(t.payload), 0) + coalesce(octet_length(t.headers), 0) AS size
				FROM (` + from + `) t ORDER BY t.id LIMIT $2) u) v`
	// A first row of id 0, always there, carries the snapshot's open
	// transactions as "xmax:xip,xip...", so that even a claim that finds
	// nothing tells them.
	db, err := conn.get(ctx, s.db, s.cfg.PollOnly)
	if err != nil {
		return claimed{}, err
	}
	query := `SELECT * FROM (
			SELECT 0::bigint, NULL::uuid, '', 0, '', '', '', NULL::text, NULL::text, now(), 0, NULL::bigint, NULL::bigint, 0, 0::bigint, 0::bigint, true,
				pg_snapshot_xmax(pg_current_snapshot())::text || ':' ||
				array_to_string(ARRAY(SELECT pg_snapshot_xip(pg_current_snapshot())), ',')
			UNION ALL
			SELECT w.id, w.event_id, w.event_name, w.event_version, w.topic, w.aggregate_type, w.aggregate_id,
				CASE WHEN w.kept THEN w.payload END, CASE WHEN w.kept THEN w.headers END, w.created_at, w.attempts,
				w.readable_from, w.aggregate_seq, w.part, w.wait_ms, w.size, w.kept, NULL
			FROM (` + sized + `) w WHERE w.running - w.size <= ` + budget + `
		) c ORDER BY 1`
	// Through pgx itself rather than database/sql: a claim reads thousands
	// of rows, and database/sql's per-value conversions cost more than
	// reading them.
	var out claimed
	err = db.Raw(func(dc any) error {
		rows, err := dc.(*stdlib.Conn).Conn().Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r := &row{}
			var (
				waitMS   int64
				kept     bool
				open     *string
				eventID  pgtype.UUID
				readable *int64
				seq      *int64
			)
			if err := rows.Scan(&r.id, &eventID, &r.name, &r.version, &r.topic, &r.aggregateType, &r.aggregateID,
				&r.payload, &r.headers, &r.createdAt, &r.attempts, &readable, &seq, &r.partition, &waitMS, &r.size, &kept, &open); err != nil {
				return err
			}
			if r.id == 0 {
				xmax, xip, _ := strings.Cut(*open, ":")
				out.open = openTxs{from: xmax, listed: []string{}}
				if xip != "" {
					out.open.listed = strings.Split(xip, ",")
				}
				continue
			}
			if !kept {
				out.cut, out.cutSize = true, r.size
				continue
			}
			r.eventID = eventID.Bytes
			if readable != nil {
				r.readableFrom = int(*readable)
			}
			if seq != nil {
				r.aggregateSeq = *seq
			}
			r.wait = time.Duration(waitMS) * time.Millisecond
			out.rows = append(out.rows, r)
		}
		return rows.Err()
	})
	if err != nil {
		conn.reset()
		return claimed{}, err
	}
	return out, nil
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

// failed records a failed delivery of r and when it may be tried again,
// which it returns: the rest of its aggregate waits behind it, on this
// relay and on the next owner of its partition.
func (s *store) failed(ctx context.Context, r *row, countAttempt bool, reason string) (time.Duration, error) {
	n := 0
	if countAttempt {
		n = 1
	}
	wait := s.cfg.backoff(max(r.attempts+n, 1))
	_, err := s.db.ExecContext(ctx, `UPDATE `+pgsql.QuoteIdent(s.cfg.Table)+` SET attempts = attempts + $2,
		available_at = now() + $3 * interval '1 millisecond', last_error = $4 WHERE id = $1`,
		r.id, n, wait.Milliseconds(), reason)
	return wait, err
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

// claimConn is the connection a subscription claims on, one claim at a
// time. It plans the claim once (a generic plan): planning it anew for each
// claim would cost more than running it.
type claimConn struct {
	conn *sql.Conn
}

// pooled (PollOnly: behind a pooler in transaction mode) leaves the
// session's settings alone, since other clients share it.
func (c *claimConn) get(ctx context.Context, db *sql.DB, pooled bool) (*sql.Conn, error) {
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if !pooled {
		if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	c.conn = conn
	return conn, nil
}

// reset drops the connection after an error; the next claim opens another.
func (c *claimConn) reset() {
	if c.conn != nil {
		discard(c.conn) // its session setting must not go back to the pool
		c.conn = nil
	}
}
