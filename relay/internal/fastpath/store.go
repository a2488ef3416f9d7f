package fastpath

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

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
	cfg        Settings
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
	sql    outboxdb.FastPathSQL // the other statements, rendered once
	hooks  *Hooks               // the source's; nil in tests of the store alone
	// logged tells deliveries go to the delivered log (Settings.DeliveredLog,
	// or a log a relay kept on the table before): set by init, before any
	// claim.
	logged bool
	log    outboxdb.FastLogSQL
}

func newStore(db *sql.DB, cfg Settings) *store {
	h := fnv.New64a()
	_, _ = h.Write([]byte("entoutbox partitions " + cfg.Table))
	t := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	return &store{db: db, cfg: cfg, partitions: t.Partitions(), members: t.Relays(), ownerLock: int64(h.Sum64() >> 1),
		claims: claimStatements(cfg.Table, cfg.Partitions, cfg.DeliveredLog), sql: t.FastPath(), log: t.FastLog(),
		logged: cfg.DeliveredLog}
}

// partitionExpr is the partition of an outbox row: the same for every row
// of an aggregate, and the same on every relay since PostgreSQL computes
// it. Status reads which relay holds a failing row through the same.
func partitionExpr(alias string, partitions int) string {
	return outboxdb.PartitionOf(alias, strconv.Itoa(partitions))
}

// check refuses a table that is not an outbox table, once.
func (s *store) check(ctx context.Context) error {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.checked {
		return nil
	}
	if err := outboxdb.New(s.cfg.Table, s.cfg.DeadLetterTable).Check(ctx, s.db); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	s.checked = true
	return nil
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
		if _, err := tx.ExecContext(ctx, s.sql.CreateLeases); err != nil {
			return err
		}
		if s.cfg.DeliveredLog {
			_, err := tx.ExecContext(ctx, s.log.Create)
			return err
		}
		// A log another relay kept goes on being kept: stamping now would
		// leave the rows it delivered looking pending to this relay.
		has, err := outboxdb.New(s.cfg.Table, "").HasDeliveredLog(ctx, tx)
		if err != nil {
			return err
		}
		if has && !s.logged {
			s.logged = true
			s.claims = claimStatements(s.cfg.Table, s.cfg.Partitions, true)
		}
		return nil
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
	if hook := s.ownerTxHook(); hook != nil {
		if err := hook(ctx); err != nil {
			return err
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *store) ownerTxHook() func(context.Context) error {
	if s.hooks == nil {
		return nil
	}
	return s.hooks.OwnerTx
}

// delivered records rows the broker acknowledged.
func (s *store) delivered(ctx context.Context, ids []int64) error {
	// Acks commit without waiting for the WAL flush (see
	// outboxdb.FastPathSQL.Delivered).
	q := s.sql.Delivered
	switch {
	case s.logged:
		q = s.log.Delivered
	case s.cfg.Delete:
		q = s.sql.DeliveredDelete
	}
	_, err := s.db.ExecContext(ctx, q, ids)
	return err
}

// failed records a failed delivery of r that the failure policy tries
// again (d): its attempts, when it may be tried again and why it failed.
// The rest of its aggregate waits behind it, on this relay and on the next
// owner of its partition.
func (s *store) failed(ctx context.Context, r *engine.Row, d engine.Decision) error {
	_, err := s.db.ExecContext(ctx, s.sql.Failed,
		r.ID, d.Attempts-r.Attempts, d.Wait.Milliseconds(), d.Reason)
	return err
}

// deadLetter moves a row to the dead letters after attempts tries.
// A row gone meanwhile (deleted by hand) has nothing left to move.
func (s *store) deadLetter(ctx context.Context, r *engine.Row, reason string, attempts int) error {
	t := outboxdb.New(s.cfg.Table, s.cfg.DeadLetterTable)
	if _, err := t.MoveToDeadLetters(ctx, s.db, r.ID, reason, attempts); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// floor reads the delivered log's floor: claims from the oldest row read
// from it, and below it the rows of the transactions its snapshot saw in
// progress.
func (s *store) floor(ctx context.Context) (upto int64, late openTxs, err error) {
	var xmax, xip string
	if err := s.db.QueryRowContext(ctx, s.log.Floor).Scan(&upto, &xmax, &xip); err != nil {
		return 0, openTxs{}, fmt.Errorf("reading the delivered log's floor: %w", err)
	}
	late.from, late.listed = outboxdb.ParseFloor(xmax, xip)
	return upto, late, nil
}

// compact moves the delivered log's floor over the rows delivered since,
// and drops their entries.
func (s *store) compact(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.log.Compact)
	return err
}
