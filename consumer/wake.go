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
	"time"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/listen"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
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

	mu      sync.Mutex
	off     bool               // the database cannot listen: not tried again
	waiting int                // deliveries waiting
	stop    context.CancelFunc // ends the listening; nil while not listening
	current *listen.Listener   // of the latest listening
	idle    *time.Timer        // calls stop, once nothing waited for wakeLinger
}

// newWaker returns the waker of positions in db, which listens when db is
// a database/sql database (ent's SQL driver).
func newWaker(db dialect.ExecQuerier, t Tables, tu *turns, logger watermill.LoggerAdapter) *waker {
	w := &waker{channel: wakeChannel(t), turns: tu, logger: logger}
	if d, ok := db.(interface{ DB() *sql.DB }); ok && t.Positions != "" && t.Dialect == outboxdb.Postgres { // LISTEN is PostgreSQL's
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
		w.stop, w.current = stop, w.newListener()
		go w.listen(ctx, w.current)
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

// listen listens until ctx ends, on a connection of its own made like the
// pool's (holding one of the pool's would starve a small pool),
// connecting again after a failure.
func (w *waker) listen(ctx context.Context, l *listen.Listener) {
	if err := l.Run(ctx); errors.Is(err, listen.ErrNotPgx) {
		w.logger.Info("Waiting deliveries are not woken when another instance applies their predecessor: "+
			"the database is not opened with the pgx database/sql driver; they look at their position at each pause",
			watermill.LogFields{"channel": w.channel})
		w.mu.Lock()
		w.off = true
		w.mu.Unlock()
	}
}

// newListener is the listener of one span of listening: it wakes the
// waiters of each moved aggregate, and all of them when a move may have
// been missed (the LISTEN was not in place, or its connection failed).
func (w *waker) newListener() *listen.Listener {
	return listen.New(listen.Config{DB: w.db, Channels: []string{w.channel}, OwnConnection: true,
		ApplicationName: "entoutbox consumer", Logger: w.logger,
		Lost:     "The connection on which waiting deliveries are woken failed; they look at their position at each pause meanwhile",
		OnMissed: w.turns.wakeAll,
		OnNotify: func(note listen.Notification) {
			var n moveNote
			if json.Unmarshal([]byte(note.Payload), &n) == nil && n.Schema == note.Schema {
				w.turns.wake(n.key(), n.move())
			}
		}})
}

// listening tells the LISTEN is in place.
func (w *waker) listening() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current != nil && w.current.Listening()
}
