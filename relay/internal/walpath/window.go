package walpath

import (
	"container/heap"
	"sync"

	"github.com/jackc/pglogrepl"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// walWindow is the book of one replication session: the transactions read
// and not yet confirmed, in commit order, and the rows of each aggregate in
// the order they came. At most one row per aggregate is out (being
// published, waiting for a retry or for the dead letters); the next goes
// out once it settled. The confirmed position is the end of the latest
// transaction that, with every earlier one, has all its rows settled
// (acked by the broker, or dead-lettered).
//
// The stream reader adds to it; publish outcomes, retries and dead letters
// settle it, from their own goroutines, under mu.
type walWindow struct {
	mu sync.Mutex
	// txs are the transactions read and not yet confirmed; the last is the
	// one being read while cur is set.
	txs []*walTx
	cur *walTx
	// confirmed is the position the server may forget WAL up to.
	confirmed pglogrepl.LSN
	// queued holds, per aggregate, its rows read and not settled: the
	// first is out.
	queued map[engine.Aggregate][]*walRow
	// ready is the rows whose turn came, for the dispatcher, oldest in
	// the stream first: with one publish at a time, the broker sees the
	// commit order.
	ready readyRows
	seq   uint64 // the stream position of the last row read
	// publishing counts the rows handed to the publishers and not yet
	// answered: at most the pool's size, so that the next row is chosen
	// when a publisher is free (the oldest ready then).
	publishing int
	// held counts the rows of the transactions in txs, and of those
	// confirmed whose position was not yet sent to the server (unsent): a
	// crash now would have them all sent again. open counts the rows not
	// settled, openBytes their bytes.
	held, unsent, open int
	openBytes          int64
	// delivered counts the rows settled since the session began.
	delivered int64
	stopped   bool

	// wake is signalled when rows became ready (for the dispatcher),
	// freed when rows settled (for a reader waiting for room).
	wake, freed chan struct{}
}

// walTx is a transaction read from the stream.
type walTx struct {
	xid  uint32
	end  pglogrepl.LSN // its end, from its commit message; 0 until then
	rows int           // rows read of it
	open int           // rows not settled
	// table: its rows were read from the table by the catch-up, not from
	// the stream (it is no transaction of the stream).
	table bool
}

// walRow is an outbox row read from the stream.
type walRow struct {
	engine.Row
	tx *walTx
	// bad is why the row cannot be published (malformed); it goes to the
	// dead letters as it is.
	bad error
	seq uint64 // its position in the stream
}

func newWALWindow(confirmed pglogrepl.LSN) *walWindow {
	return &walWindow{confirmed: confirmed, queued: map[engine.Aggregate][]*walRow{},
		wake: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
}

func (w *walWindow) signal() { nudge(w.wake) }

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// begin starts the transaction whose rows come next.
func (w *walWindow) begin(xid uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur = &walTx{xid: xid}
	w.txs = append(w.txs, w.cur)
}

// beginTable starts a transaction of rows read from the table (the
// catch-up's), not from the stream.
func (w *walWindow) beginTable() {
	w.begin(0)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur.table = true
}

// add takes a row of the transaction being read. A well-formed row joins
// its aggregate's queue, and goes out at once when it is the first; a
// malformed one is returned, to be dead-lettered (it is out already).
func (w *walWindow) add(r *walRow) (deadLetter bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.tx = w.cur
	w.seq++
	r.seq = w.seq
	w.cur.rows++
	w.cur.open++
	w.held++
	w.open++
	w.openBytes += r.Size
	if r.bad != nil {
		return true
	}
	a := r.Aggregate()
	q := w.queued[a]
	w.queued[a] = append(q, r)
	if len(q) == 0 {
		heap.Push(&w.ready, r)
		w.signal()
	}
	return false
}

// commit ends the transaction being read at end.
func (w *walWindow) commit(end pglogrepl.LSN) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur.end = end
	w.cur = nil
	w.advance()
}

// confirmAt moves the confirmed position to lsn when nothing is held: no
// transaction read and not confirmed, none half read.
func (w *walWindow) confirmAt(lsn pglogrepl.LSN) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.txs) == 0 && w.cur == nil && lsn > w.confirmed {
		w.confirmed = lsn
	}
}

// toSend is the confirmed position, about to be sent to the server: the
// rows confirmed up to it are no longer held.
func (w *walWindow) toSend() pglogrepl.LSN {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held -= w.unsent
	w.unsent = 0
	return w.confirmed
}

// unsentRows counts the rows confirmed since the position was last sent.
func (w *walWindow) unsentRows() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unsent
}

// position is the confirmed position.
func (w *walWindow) position() pglogrepl.LSN {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.confirmed
}

// mayRead tells whether the reader may read on: the rows not settled are
// below the bounds (a row larger than the byte bound is held alone), and
// the rows not confirmed are below the row bound, unless they all belong
// to the one transaction being read (it is read through: it cannot be
// confirmed before its end).
func (w *walWindow) mayRead(maxRows int, maxBytes int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open >= maxRows || w.open > 0 && w.openBytes >= maxBytes {
		return false
	}
	return w.held < maxRows || len(w.txs) == 1 && w.cur != nil
}

// next takes the next row whose turn came, if any and if fewer than limit
// are being published.
func (w *walWindow) next(limit int) *walRow {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ready) == 0 || w.stopped || w.publishing >= limit {
		return nil
	}
	w.publishing++
	return heap.Pop(&w.ready).(*walRow)
}

// answered records that a row handed out by next was published or failed.
func (w *walWindow) answered() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.publishing--
	w.signal()
}

// again makes r ready once more (after a failed publish's wait).
func (w *walWindow) again(r *walRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	heap.Push(&w.ready, r)
	w.signal()
}

// settle records that r was acked or dead-lettered: the next row of its
// aggregate goes out, and the confirmed position moves over the
// transactions now settled.
func (w *walWindow) settle(r *walRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.tx.open--
	w.open--
	w.openBytes -= r.Size
	w.delivered++
	if r.bad == nil {
		a := r.Aggregate()
		q := w.queued[a]
		if len(q) > 0 && q[0] == r {
			q[0] = nil
			q = q[1:]
		}
		if len(q) == 0 {
			delete(w.queued, a)
		} else {
			w.queued[a] = q
			if !w.stopped {
				heap.Push(&w.ready, q[0])
			}
		}
	}
	w.advance()
	w.signal()
	nudge(w.freed)
}

// advance confirms the leading transactions that are read to their end
// and settled.
func (w *walWindow) advance() {
	n := 0
	for _, tx := range w.txs {
		if tx.end == 0 || tx.open > 0 {
			break
		}
		w.confirmed = max(w.confirmed, tx.end)
		w.unsent += tx.rows
		n++
	}
	if n > 0 {
		clear(w.txs[:n])
		w.txs = w.txs[n:]
	}
}

// stop makes the window hand out nothing more: the session is over.
func (w *walWindow) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.ready = nil
	w.signal()
}

// counts is the window's rows: not settled, and settled since the start.
func (w *walWindow) counts() (open int, delivered int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open, w.delivered
}

// readyRows is a heap of rows by stream position.
type readyRows []*walRow

func (h readyRows) Len() int           { return len(h) }
func (h readyRows) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h readyRows) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *readyRows) Push(x any)        { *h = append(*h, x.(*walRow)) }
func (h *readyRows) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
