package consumer

// Waking the deliveries that wait for their aggregate's previous event
// when another instance applies it (turns.go wakes them when this one
// does). The lowest waiting delivery marks the position (ordering.NoteWaiting:
// waiting_seq); a statement that moves a marked position notifies the
// positions table's channel with the aggregate, at commit, and keeps the
// mark while the marked event still waits (outboxdb's WaitingAfterMove). A handler
// set listens on that channel while deliveries wait in it, on a
// connection of its own, and wakes its waiters of the aggregate: its
// lowest one looks at the position at once, not at the end of its pause,
// and marks it again only when the mark is gone or is above it. Nothing
// is notified while no event waits: NOTIFY serializes the commits that
// send one. Without the connection (a database/sql driver other than
// pgx, a pooler in transaction mode) the waiters see the move at their
// next look.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// wakeChannel is the channel on which the moves of t's positions wake the
// deliveries waiting on them.
func wakeChannel(t Tables) string { return t.DB().PositionsChannel() }

// moveNote is a notification's payload: an aggregate's position moved.
type moveNote struct {
	// Schema is the writer's current schema: the channel is named after
	// the table alone, which other schemas of the database may hold too.
	Schema        string `json:"schema"`
	Consumer      string `json:"consumer"`
	Topic         string `json:"topic"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	LastSeq       int64  `json:"last_seq"`
	WaitingSeq    *int64 `json:"waiting_seq"`
}

func (n moveNote) key() turnKey { return turnKey{n.Consumer, n.Topic, n.AggregateType, n.AggregateID} }

func (n moveNote) move() positionMove {
	mv := positionMove{last: n.LastSeq, told: true}
	if n.WaitingSeq != nil {
		mv.mark = *n.WaitingSeq
	}
	return mv
}

// wakeLinger is how long a set keeps listening after its last waiting
// delivery stopped waiting: gaps come in bursts.
const wakeLinger = 10 * time.Second

// waker listens on the set's wake channel while deliveries wait.
type waker struct {
	db      *sql.DB // where the positions are; nil: the waiters poll only
	channel string
	turns   *turns
	logger  watermill.LoggerAdapter

	listening atomic.Bool // the LISTEN is in place

	mu      sync.Mutex
	off     bool               // the database cannot listen: not tried again
	waiting int                // deliveries waiting
	stop    context.CancelFunc // ends the listening; nil while not listening
	idle    *time.Timer        // calls stop, once nothing waited for wakeLinger
}

// newWaker returns the waker of positions in db, which listens when db is
// a database/sql database (ent's SQL driver).
func newWaker(db dialect.ExecQuerier, t Tables, tu *turns, logger watermill.LoggerAdapter) *waker {
	w := &waker{channel: wakeChannel(t), turns: tu, logger: logger}
	if d, ok := db.(interface{ DB() *sql.DB }); ok && t.Positions != "" {
		w.db = d.DB()
	}
	return w
}

// hold is called when a delivery begins to wait, release when it stops.
func (w *waker) hold() {
	if w.db == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		return
	}
	w.waiting++
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	if w.stop == nil {
		ctx, stop := context.WithCancel(context.Background())
		w.stop = stop
		go w.listen(ctx)
	}
}

func (w *waker) release() {
	if w.db == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		return
	}
	if w.waiting--; w.waiting > 0 || w.stop == nil {
		return
	}
	var idle *time.Timer
	idle = time.AfterFunc(wakeLinger, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.idle == idle { // not held again since
			w.stop()
			w.stop, w.idle = nil, nil
		}
	})
	w.idle = idle
}

// listen listens until ctx ends, connecting again after a failure.
func (w *waker) listen(ctx context.Context) {
	for pause := 100 * time.Millisecond; ctx.Err() == nil; pause = min(2*pause, 5*time.Second) {
		started := time.Now()
		err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotPgx) {
			w.logger.Info("Waiting deliveries are not woken when another instance applies their predecessor: "+
				"the database is not opened with the pgx database/sql driver; they look at their position at each pause",
				watermill.LogFields{"channel": w.channel})
			w.mu.Lock()
			w.off = true
			w.mu.Unlock()
			return
		}
		if time.Since(started) > time.Minute {
			pause = 100 * time.Millisecond
		}
		w.logger.Info("The connection on which waiting deliveries are woken failed; they look at their position "+
			"at each pause meanwhile", watermill.LogFields{"channel": w.channel, "err": err.Error()})
		w.turns.wakeAll() // a move may have been missed
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// listenOnce listens on a connection of its own, made like the pool's
// (holding one of the pool's would starve a small pool), until it fails
// or ctx ends.
func (w *waker) listenOnce(ctx context.Context) error {
	cfg, err := w.connConfig(ctx)
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	var schema string
	if err := c.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "LISTEN "+pgsql.QuoteIdent(w.channel)); err != nil {
		return err
	}
	w.listening.Store(true)
	defer w.listening.Store(false)
	w.turns.wakeAll() // what moved before the LISTEN was in place
	for {
		note, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var n moveNote
		if json.Unmarshal([]byte(note.Payload), &n) == nil && n.Schema == schema {
			w.turns.wake(n.key(), n.move())
		}
	}
}

var errNotPgx = errors.New("not the pgx database/sql driver")

// connConfig is the configuration of the pool's connections.
func (w *waker) connConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		// pgx's database/sql connection, by its method: importing its
		// package would register the driver in every producer's binary.
		sc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		cfg = sc.Conn().Config().Copy()
		cfg.OnNotification = nil // the pool connection's: pgx sets this one's own
		if cfg.RuntimeParams["application_name"] == "" {
			// Named in pg_stat_activity, where it is one more than the pool.
			cfg.RuntimeParams["application_name"] = "entoutbox consumer"
		}
		return nil
	})
	return cfg, err
}
