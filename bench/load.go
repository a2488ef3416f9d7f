package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// payloadSize is the size of the encoded payload of every event: big enough
// that the relay moves real bytes, like a typical domain event.
const payloadSize = 1024

// payload is the ProfileUpdated every event carries, its display name
// padded so that it encodes to payloadSize bytes.
var payload = func() testent.ProfileUpdated {
	p := testent.ProfileUpdated{
		DisplayName: "x",
		Verified:    true,
		Score:       42,
		Balance:     12.5,
		UpdatedAt:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		SessionID:   uuid.MustParse("0190d6a4-8c3e-7d2a-9b1f-3c4d5e6f7a8b"),
		Plan:        "pro",
		Settings:    json.RawMessage(`{"theme":"dark","locale":"en-GB"}`),
		Tags:        []string{"bench", "outbox", "relay"},
	}
	b, err := json.Marshal(&p)
	if err != nil {
		panic(err)
	}
	p.DisplayName = strings.Repeat("x", 1+payloadSize-len(b))
	return p
}()

// aggregateID spreads events over n aggregates.
func aggregateID(i, n int) string { return strconv.Itoa(i % n) }

// prefill emits n events in transactions of 100 from a few connections at
// once, for the drain measurement, and returns their ids. A transaction
// that MySQL/MariaDB aborted to break a deadlock runs again, as the error
// asks ("try restarting transaction"), up to maxDeadlocks times; deadlocks
// is how many times one did (never on PostgreSQL).
func prefill(ctx context.Context, client *testent.Client, n, aggregates int) (ids []string, deadlocks int, err error) {
	const perTx, workers, maxDeadlocks = 100, 4, 10
	ids = make([]string, n)
	for i := range ids {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, 0, fmt.Errorf("generating an event id: %w", err)
		}
		ids[i] = id.String()
	}
	var retried atomic.Int64
	err = inBatches(ctx, n, perTx, workers, func(start int) error {
		end := min(start+perTx, n)
		for attempt := 0; ; attempt++ {
			err := client.WithTx(ctx, func(tx *testent.Tx) error {
				for i := start; i < end; i++ {
					if err := emitOne(ctx, tx, ids[i], i, aggregates); err != nil {
						return err
					}
				}
				return nil
			})
			if isDeadlock(err) && attempt < maxDeadlocks && ctx.Err() == nil {
				retried.Add(1)
				continue
			}
			if err != nil {
				return fmt.Errorf("emitting events %d to %d: %w", start, end, err)
			}
			return nil
		}
	})
	return ids, int(retried.Load()), err
}

// isDeadlock tells whether err is MySQL's or MariaDB's deadlock error:
// the transaction was rolled back to break one.
func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213 // ER_LOCK_DEADLOCK
}

// inBatches calls write with the start of each batch of perTx out of n,
// from workers goroutines at once, until all are written or one fails, and
// returns the first error.
func inBatches(ctx context.Context, n, perTx, workers int, write func(start int) error) error {
	batches := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for start := range batches {
				if err := write(start); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
loop:
	for start := 0; start < n; start += perTx {
		select {
		case batches <- start:
		case err = <-errs:
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	close(batches)
	wg.Wait()
	close(errs)
	if err == nil {
		err = <-errs // nil once closed and empty
	}
	return err
}

func emitOne(ctx context.Context, tx *testent.Tx, id string, i, aggregates int, opts ...events.EmitOption) error {
	return tx.Outbox.EmitProfileUpdated(ctx, aggregateID(i, aggregates), payload,
		append(opts, events.WithEventID(uuid.MustParse(id)))...)
}

// pacedLoad is what a paced emitter committed: the id and the wall-clock
// time right after Commit returned, which is the earliest moment the event
// can be said to exist.
type pacedLoad struct {
	ids       []string
	committed map[string]time.Time
	// due is the time each scheduled event was emitted for (DeliverAt);
	// nil unless the load schedules its events.
	due map[string]time.Time
	// span is how long handing out the ticks took, plus one interval:
	// longer than asked when the emitters could not keep up.
	span time.Duration
	err  error // the first failed transaction, if any
}

// runPaced commits events at p.rate events/s for d, p.perTx of them per
// transaction (each of its own aggregate). A scheduler hands out ticks at
// their due time and workers commit them, so one slow commit does not
// delay the next events; ticks that fall behind are sent as soon as a
// worker is free. With p.lead, each event is scheduled (events.DeliverAt)
// for its tick's time plus p.lead: an emitter that falls behind commits it
// later, but it stays due at that time.
func runPaced(ctx context.Context, client *testent.Client, p paced, d time.Duration, aggregates int) *pacedLoad {
	l := &pacedLoad{committed: make(map[string]time.Time)}
	if p.lead > 0 {
		l.due = make(map[string]time.Time)
	}
	interval := time.Second * time.Duration(p.perTx) / time.Duration(p.rate)
	start := time.Now()
	var mu sync.Mutex
	ticks := make(chan int, p.workers)
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			ids := make([]string, p.perTx)
			for i := range ticks {
				for k := range ids {
					ids[k] = uuid.Must(uuid.NewV7()).String()
				}
				var opts []events.EmitOption
				due := start.Add(time.Duration(i)*interval + p.lead)
				if p.lead > 0 {
					opts = append(opts, events.DeliverAt(due))
				}
				err := client.WithTx(ctx, func(tx *testent.Tx) error {
					for k, id := range ids {
						if err := emitOne(ctx, tx, id, i*p.perTx+k, aggregates, opts...); err != nil {
							return err
						}
					}
					return nil
				})
				at := time.Now()
				mu.Lock()
				if err != nil && l.err == nil {
					l.err = fmt.Errorf("committing a paced event: %w", err)
				} else if err == nil {
					for _, id := range ids {
						l.ids = append(l.ids, id)
						l.committed[id] = at
						if l.due != nil {
							l.due[id] = due
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= d {
			break
		}
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		ticks <- i
		l.span = time.Since(start) + interval
	}
	close(ticks)
	wg.Wait()
	return l
}

// heldTxs are transactions left open on purpose, as a slow report or a
// forgotten psql session would: one in the outbox's database that wrote to
// an unrelated table, one in another database of the same server that only
// took a transaction id.
type heldTxs struct {
	txs   []*sql.Tx
	close []func()
}

func holdTransactions(ctx context.Context, s *sandbox, otherURL string) (*heldTxs, error) {
	h := &heldTxs{}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("opening the held transaction: %w", err)
	}
	h.txs = append(h.txs, tx)
	if _, err := tx.ExecContext(ctx, `INSERT INTO bench_other (note) VALUES ('held open by the bench')`); err != nil {
		h.release()
		return nil, fmt.Errorf("writing in the held transaction: %w", err)
	}
	if otherURL == "" {
		return h, nil
	}
	other, err := sql.Open("pgx", otherURL)
	if err != nil {
		h.release()
		return nil, fmt.Errorf("opening database %s: %w", otherDatabase, err)
	}
	h.close = append(h.close, func() { other.Close() })
	otx, err := other.BeginTx(ctx, nil)
	if err != nil {
		h.release()
		return nil, fmt.Errorf("opening the held transaction in database %s: %w", otherDatabase, err)
	}
	h.txs = append(h.txs, otx)
	var xid int64
	if err := otx.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
		h.release()
		return nil, fmt.Errorf("taking a transaction id in database %s: %w", otherDatabase, err)
	}
	return h, nil
}

// release rolls the held transactions back.
func (h *heldTxs) release() error {
	var errs []error
	for _, tx := range h.txs {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			errs = append(errs, fmt.Errorf("ending a held transaction: %w", err))
		}
	}
	h.txs = nil
	for _, c := range h.close {
		c()
	}
	h.close = nil
	return errors.Join(errs...)
}
