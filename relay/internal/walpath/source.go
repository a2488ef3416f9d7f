package walpath

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// pathName is the WAL path's name in the logs (the relay's PathWAL).
const pathName = "wal"

// Settings is what the WAL path takes of the relay's settings, the
// defaults filled in.
type Settings struct {
	DB                     *sql.DB
	Table, DeadLetterTable string
	// Slot, Publication, ReplicationURL, StatusInterval, StandbyRetry and
	// ProgressInterval are the relay's Config.WAL ones.
	Slot, Publication, ReplicationURL              string
	StatusInterval, StandbyRetry, ProgressInterval time.Duration
	Concurrency, BatchSize                         int
	MaxBytesInFlight                               int64
	CloseTimeout                                   time.Duration
	Attributes                                     engine.Attributes // what the relay's CloudEvents adds to every message
	Logger                                         watermill.LoggerAdapter
	Metrics                                        *metrics.Metrics // nil when off
	// Backoff spaces the tries of a failed move to the dead letters.
	Backoff func(attempt int) time.Duration
	// SlotCreating, when set (by the relay's tests), runs right before the
	// source creates its slot.
	SlotCreating func()
}

// OutageCap bounds the WAL path's wait after a failure in an outage.
const OutageCap = time.Second

// Policy is the WAL path's failure policy: its outages back off by their
// own count, up to OutageCap, since it holds the row in memory while it
// waits and wants it out soon after the broker is back.
func Policy(maxAttempts int, backoff func(attempt int) time.Duration) engine.Policy {
	return engine.Policy{MaxAttempts: maxAttempts, Backoff: backoff, OutageCap: OutageCap}
}

// Source is the WAL read path: it streams the slot, one session at a
// time, and hands the rows whose turn came to the engine. It knows of the
// relay only the settings it was given.
type Source struct {
	cfg  Settings
	stat *walState       // what it does now, for Status
	sql  outboxdb.WALSQL // its statements, rendered once
}

// New is the WAL source of cfg; Run starts it.
func New(cfg Settings) *Source {
	return &Source{cfg: cfg, stat: &walState{slot: cfg.Slot, role: Connecting}, sql: outboxdb.New(cfg.Table, "").WAL()}
}

// Status is what the source does now.
func (w *Source) Status() Status { return w.stat.status() }

// Run streams the slot until ctx ends: one session at a time, a new one
// after the connection is lost (from the slot's confirmed position), and
// as a standby while another relay streams the slot.
func (w *Source) Run(ctx context.Context, e *engine.Engine) error {
	cfg := &w.cfg
	if err := w.ensurePublication(ctx); err != nil {
		return err
	}
	if err := ensureProgressTable(ctx, w.cfg.DB, w.cfg.Table); err != nil {
		return err
	}
	if err := registerSlot(ctx, w.cfg.DB, w.cfg.Table, cfg.Slot); err != nil {
		return err
	}
	stat := w.stat
	var wg sync.WaitGroup
	defer wg.Wait()
	if cfg.ProgressInterval > 0 {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wg.Add(1)
		go func() { defer wg.Done(); w.recordWALProgress(pctx, stat) }()
	}
	w.cfg.Logger.Info("Relay running", map[string]any{"path": pathName, "table": w.cfg.Table, "slot": cfg.Slot})
	failures, standby := 0, false
	for {
		started := time.Now()
		err := w.streamWAL(ctx, e, stat)
		if ctx.Err() != nil {
			return nil
		}
		var fatal walFatal
		switch {
		case errors.As(err, &fatal):
			return fatal.err
		case errors.Is(err, errSlotActive):
			if !standby {
				w.cfg.Logger.Info("Another relay streams the slot; waiting as a standby", watermill.LogFields{"slot": cfg.Slot})
				standby = true
			}
			stat.set(Standby, 0, nil)
			failures = 0
			if !backoff.Sleep(ctx, cfg.StandbyRetry) {
				return nil
			}
			continue
		}
		if standby {
			standby = false
		}
		if time.Since(started) > 10*time.Second {
			failures = 0 // it streamed a while: start the backoff afresh
		}
		failures++
		wait := backoff.Exponential(100*time.Millisecond, 5*time.Second, failures)
		if failures <= 3 || failures%20 == 0 {
			w.cfg.Logger.Error("The replication stream failed; reconnecting", err,
				watermill.LogFields{"slot": cfg.Slot, "retry_in": wait.String(), "failures": failures})
		}
		stat.set(Connecting, 0, nil)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// ensurePublication creates the publication of the table's inserts when
// absent, and refuses one that does not publish them.
func (w *Source) ensurePublication(ctx context.Context) error {
	pubName, table := w.cfg.Publication, pgsql.QuoteIdent(w.cfg.Table)
	var exists, publishes bool
	err := w.cfg.DB.QueryRowContext(ctx, w.sql.Publication, pubName, table).Scan(&exists, &publishes)
	if err != nil {
		return fmt.Errorf("relay: looking for publication %q: %w", pubName, err)
	}
	if exists {
		if !publishes {
			return fmt.Errorf("relay: publication %q exists but does not publish the inserts of table %q: "+
				"choose another Config.WAL.Publication, or ALTER PUBLICATION it", pubName, w.cfg.Table)
		}
		return nil
	}
	_, err = w.cfg.DB.ExecContext(ctx, outboxdb.New(w.cfg.Table, "").CreatePublication(pubName))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" {
		return nil // another relay created it meanwhile
	}
	if err != nil {
		return fmt.Errorf("relay: creating publication %q for table %q: %w", pubName, w.cfg.Table, err)
	}
	return nil
}

// Role is what a WAL source does now.
type Role string

// The roles, as the relay's WALRole names them.
const (
	// Connecting: opening the replication connection, or waiting to open
	// it again after it failed.
	Connecting Role = "connecting"
	// Active: streaming the slot.
	Active Role = "active"
	// Standby: another session streams the slot; it tries to take it
	// every StandbyRetry.
	Standby Role = "standby"
	// Stopped: a session ended, and the next has not begun.
	Stopped Role = "stopped"
)

// Status is what a WAL source is doing.
type Status struct {
	Slot string
	Role Role
	// Confirmed is the position sent to the server as delivered.
	Confirmed string
	// InFlight counts the rows read and not yet acked or dead-lettered.
	InFlight int
	// Delivered counts the rows acked or dead-lettered since the source
	// started.
	Delivered int64
}

// walState is a WAL relay's status, shared by its sessions.
type walState struct {
	mu        sync.Mutex
	slot      string
	role      Role
	confirmed pglogrepl.LSN
	w         *walWindow
	delivered atomic.Int64
}

func (s *walState) set(role Role, confirmed pglogrepl.LSN, w *walWindow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.role, s.w = role, w
	if confirmed != 0 {
		s.confirmed = confirmed
	}
}

func (s *walState) confirm(pos pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.confirmed = max(s.confirmed, pos)
}

// position is the confirmed position while streaming, and whether it is.
func (s *walState) position() (pglogrepl.LSN, bool) {
	s.mu.Lock()
	w := s.w
	active := s.role == Active
	s.mu.Unlock()
	if !active || w == nil {
		return 0, false
	}
	return w.position(), true
}

func (s *walState) status() Status {
	s.mu.Lock()
	st := Status{Slot: s.slot, Role: s.role, Confirmed: s.confirmed.String(), Delivered: s.delivered.Load()}
	w := s.w
	s.mu.Unlock()
	if w != nil {
		st.InFlight, _ = w.counts()
		st.Confirmed = w.position().String()
	}
	return st
}
