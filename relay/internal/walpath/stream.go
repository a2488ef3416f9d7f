package walpath

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// errSlotActive is a session's end when another session streams the slot:
// the relay waits as a standby.
var errSlotActive = errors.New("relay: the replication slot is streamed by another session")

// walFatal wraps an error no reconnection cures (a setting of the server
// or of the relay): Run returns it.
type walFatal struct{ err error }

func (e walFatal) Error() string { return e.err.Error() }
func (e walFatal) Unwrap() error { return e.err }

// classify turns what a session ended with into errSlotActive, a walFatal,
// or leaves it as it is (a lost connection: reconnect).
func classifyWAL(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "55006": // object_in_use: "replication slot ... is active for PID ..."
		return errSlotActive
	case "42501", "28000", "28P01", "3D000", "55000", "42704":
		// No privilege or role, no database, wal_level below logical, a
		// publication that is gone: a person must act.
		return walFatal{err}
	}
	return err
}

// replicationConfig is the replication connection's settings: ReplicationURL's,
// or else those of DB's own connections, with replication=database.
func (w *Source) replicationConfig(ctx context.Context) (*pgconn.Config, error) {
	var cfg *pgconn.Config
	if u := w.cfg.ReplicationURL; u != "" {
		c, err := pgconn.ParseConfig(u)
		if err != nil {
			return nil, walFatal{fmt.Errorf("relay: Config.WAL.ReplicationURL: %w", err)}
		}
		cfg = c
	} else {
		conn, err := w.cfg.DB.Conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("relay: reading the database's connection settings: %w", err)
		}
		defer conn.Close()
		err = conn.Raw(func(dc any) error {
			c, ok := dc.(*stdlib.Conn)
			if !ok {
				return walFatal{fmt.Errorf("relay: Config.DB's driver is %T, not pgx's: set Config.WAL.ReplicationURL", dc)}
			}
			cfg = c.Conn().Config().Config.Copy()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	cfg.RuntimeParams["replication"] = "database"
	// The stream's values come in text format; these make timestamps
	// easy to read back.
	cfg.RuntimeParams["DateStyle"] = "ISO"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	return cfg, nil
}

// walSession is one replication connection streaming the slot, and the
// rows it read.
type walSession struct {
	src  *Source
	e    *engine.Engine
	conn *pgconn.PgConn
	w    *walWindow
	// relations are the outbox table's column positions, by relation id.
	relations map[uint32]*walRelation
	metrics   *metrics.Metrics
	// ctx ends when the session does: no more publishes, retries or dead
	// letters start.
	ctx  context.Context
	out  *sync.WaitGroup // publishes and dead letters under way
	stat *walState
	// drain: next reports nothing more once every row of w is settled
	// (the catch-up's batches, see catchup.go), instead of waiting for
	// the stream's next.
	drain bool
}

// streamWAL runs one session: it connects, makes sure of the slot, streams
// it until ctx ends or the connection fails, and returns why it ended
// (nil when ctx ended).
func (w *Source) streamWAL(ctx context.Context, e *engine.Engine, stat *walState) error {
	cfg := &w.cfg
	pcfg, err := w.replicationConfig(ctx)
	if err != nil {
		return err
	}
	conn, err := pgconn.ConnectConfig(ctx, pcfg)
	if err != nil {
		return classifyWAL(fmt.Errorf("relay: opening the replication connection: %w", err))
	}
	defer conn.Close(context.Background())
	if err := w.ensureSlot(ctx, conn); err != nil {
		return classifyWAL(err)
	}
	err = pglogrepl.StartReplication(ctx, conn, cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'",
			"publication_names " + pgsql.QuoteLiteral(cfg.Publication)},
	})
	if err != nil {
		return classifyWAL(fmt.Errorf("relay: starting replication of slot %q: %w", cfg.Slot, err))
	}
	// The slot is ours now: its confirmed position is where the stream
	// starts, and what status updates start from.
	var confirmed pglogrepl.LSN
	if err := w.cfg.DB.QueryRowContext(ctx, w.sql.SlotPosition, cfg.Slot).Scan(&confirmed); err != nil {
		return fmt.Errorf("relay: reading the position of slot %q: %w", cfg.Slot, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &walSession{src: w, e: e, conn: conn, w: newWALWindow(confirmed),
		relations: map[uint32]*walRelation{}, metrics: w.cfg.Metrics, ctx: sctx, out: &sync.WaitGroup{}, stat: stat}
	stat.set(Active, confirmed, s.w)
	w.cfg.Logger.Info("Streaming the replication slot", watermill.LogFields{"slot": cfg.Slot,
		"publication": cfg.Publication, "confirmed": confirmed.String()})
	dispatched := make(chan struct{})
	go func() { defer close(dispatched); s.dispatch() }()
	err = s.read(ctx)
	// Whatever ended it: send nothing more, let what is out finish, and
	// confirm what it settled (the connection may be gone: then the next
	// session starts from the slot's position and sends the rest again).
	cancel()
	s.w.stop()
	<-dispatched
	engine.AwaitPublishes(s.out, w.cfg.CloseTimeout, w.cfg.Logger)
	if err == nil && !conn.IsClosed() {
		// A graceful stop: the server reads it before the connection
		// closes. (A failed connection is being closed by pgconn.)
		_ = s.sendStatus(false)
	}
	stat.set(Stopped, s.w.position(), nil)
	if ctx.Err() != nil {
		return nil
	}
	return classifyWAL(err)
}

// read reads the stream until ctx ends or the connection fails, sending the
// confirmed position every StatusInterval and when the server asks. While
// the window is full it reads nothing, but still sends the position, so
// the server does not end the session for silence (wal_sender_timeout).
func (s *walSession) read(ctx context.Context) error {
	nextStatus := time.Now()
	// Confirmed rows are sent on in good time: until the server has their
	// position they are held (a crash would send them again).
	sendAt := max(s.src.cfg.BatchSize/4, 1)
	deadline := &deadlineCtx{parent: ctx}
	defer deadline.stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		mayRead := s.w.mayRead(s.src.cfg.BatchSize, s.src.cfg.MaxBytesInFlight)
		if unsent := s.w.unsentRows(); !time.Now().Before(nextStatus) || unsent >= sendAt || unsent > 0 && !mayRead {
			if err := s.sendStatus(false); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.src.cfg.StatusInterval)
			continue
		}
		if !mayRead {
			t := time.NewTimer(time.Until(nextStatus))
			select {
			case <-s.w.freed:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		msg, err := s.conn.ReceiveMessage(deadline.until(nextStatus))
		if err != nil {
			if pgconn.Timeout(err) || ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("relay: reading the replication stream: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			reply, err := s.handle(msg.Data)
			if err != nil {
				return err
			}
			if reply {
				if err := s.sendStatus(false); err != nil {
					return err
				}
				nextStatus = time.Now().Add(s.src.cfg.StatusInterval)
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("relay: the replication stream ended: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return errors.New("relay: the server ended the replication stream")
		}
	}
}

// deadlineCtx hands out a context that ends at a deadline, the same one
// for as long as the deadline stays: one per status interval rather than
// one (and a timer) per message read, of which the stream brings
// thousands a second.
type deadlineCtx struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
}

func (d *deadlineCtx) until(t time.Time) context.Context {
	if d.ctx == nil || !d.at.Equal(t) {
		d.stop()
		d.ctx, d.cancel = context.WithDeadline(d.parent, t)
		d.at = t
	}
	return d.ctx
}

func (d *deadlineCtx) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// sendStatus tells the server the confirmed position: it may forget the
// WAL before it, and the slot starts there next time.
func (s *walSession) sendStatus(reply bool) error {
	pos := s.w.toSend()
	s.stat.confirm(pos)
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos, ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("relay: sending the confirmed position: %w", err)
	}
	return nil
}

// handle takes one message of the stream, and tells whether the server
// asked for a reply.
func (s *walSession) handle(data []byte) (reply bool, err error) {
	if len(data) == 0 {
		return false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return false, fmt.Errorf("relay: reading a keepalive: %w", err)
		}
		// Nothing held: the WAL up to the server's position holds no row of
		// ours still to deliver (other tables' WAL must not pile up).
		s.w.confirmAt(pkm.ServerWALEnd)
		return pkm.ReplyRequested, nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return false, fmt.Errorf("relay: reading WAL data: %w", err)
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return false, fmt.Errorf("relay: decoding a pgoutput message: %w", err)
		}
		return false, s.take(m)
	}
	return false, nil
}

// take applies one decoded pgoutput message.
func (s *walSession) take(m pglogrepl.Message) error {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		s.relations[m.RelationID] = s.relation(m)
	case *pglogrepl.BeginMessage:
		s.w.begin(m.Xid)
	case *pglogrepl.InsertMessage:
		rel, ok := s.relations[m.RelationID]
		if !ok {
			return fmt.Errorf("relay: an insert in relation %d came before its description", m.RelationID)
		}
		if rel == nil {
			return nil // another table of the publication
		}
		r := rel.decode(m.Tuple)
		if s.w.add(r) {
			s.deadLetter(r, engine.Malformed(r.bad.Error(), 0))
		}
	case *pglogrepl.CommitMessage:
		s.w.commit(m.TransactionEndLSN)
	}
	return nil
}

// relation maps the columns of the outbox table, or returns nil for
// another table someone added to the publication.
func (s *walSession) relation(m *pglogrepl.RelationMessage) *walRelation {
	if m.RelationName != s.src.cfg.Table {
		s.src.cfg.Logger.Info("The publication holds another table; its rows are not relayed", watermill.LogFields{
			"publication": s.src.cfg.Publication, "table": m.Namespace + "." + m.RelationName})
		return nil
	}
	rel := &walRelation{cols: map[string]int{}}
	for i, c := range m.Columns {
		rel.cols[c.Name] = i
	}
	return rel
}

// dispatch hands the rows whose turn came to the engine until the session
// ends: first those written before the slot's start (the stream holds its
// own meanwhile), then the stream's.
func (s *walSession) dispatch() {
	if !s.catchUp() {
		return
	}
	s.e.Run(s.ctx, s.next)
}

// next is the next row whose turn came, for the engine: false once the
// session ends.
func (s *walSession) next(ctx context.Context) (engine.Delivery, bool) {
	for {
		if r := s.w.next(s.src.cfg.Concurrency); r != nil {
			s.out.Add(1)
			return &walDelivery{s: s, r: r, msg: r.Message(s.src.cfg.Attributes)}, true
		}
		if s.drain {
			if open, _ := s.w.counts(); open == 0 {
				return nil, false
			}
		}
		select {
		case <-s.w.wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// walDelivery is a row the session handed the engine, and the way its
// outcome goes back to the window.
type walDelivery struct {
	s   *walSession
	r   *walRow
	msg *message.Message
}

func (d *walDelivery) Row() *engine.Row          { return &d.r.Row }
func (d *walDelivery) Message() *message.Message { return d.msg }

// MayPublish is always true: one session at a time streams the slot, and
// the next reads again what this one did not confirm.
func (d *walDelivery) MayPublish() bool { return true }

func (d *walDelivery) Delivered() {
	d.s.settle(d.r)
	d.answered()
}

func (d *walDelivery) Unsent() {
	d.s.w.again(d.r)
	d.answered()
}

// Failed carries out the failure policy's decision: a retry after its wait
// (outages do not count as attempts), or the dead letters.
func (d *walDelivery) Failed(dec engine.Decision) {
	d.r.Attempts, d.r.Outages = dec.Attempts, dec.Outages
	if dec.DeadLetter {
		d.s.deadLetter(d.r, dec)
	} else {
		d.s.retry(d.r, dec.Wait)
	}
	d.answered()
}

func (d *walDelivery) answered() {
	d.s.w.answered()
	d.s.out.Done()
}

func (s *walSession) settle(r *walRow) {
	s.w.settle(r)
	s.stat.delivered.Add(1)
}

func (s *walSession) retry(r *walRow, wait time.Duration) {
	time.AfterFunc(wait, func() { s.w.again(r) })
}

// deadLetter moves r to the dead letters as d says, beside the stream,
// trying again while the database fails, and settles it once it is there.
func (s *walSession) deadLetter(r *walRow, d engine.Decision) {
	s.out.Add(1)
	go func() {
		defer s.out.Done()
		for failures := 1; ; failures++ {
			written, err := s.src.moveToDeadLetters(context.WithoutCancel(s.ctx), r, d.Reason, d.Attempts)
			if err == nil {
				if written {
					engine.DeadLettered(s.metrics, s.src.cfg.Logger, pathName, s.src.cfg.Slot, &r.Row, d)
				} else {
					s.src.cfg.Logger.Info("A row streamed again already has its dead letter", watermill.LogFields{
						"event_id": r.EventID.String(), "row_id": r.ID, "relay": s.src.cfg.Slot})
				}
				s.settle(r)
				return
			}
			if failures <= 3 {
				s.src.cfg.Logger.Error("Moving a row to the dead letters failed; trying again", err,
					watermill.LogFields{"event_id": r.EventID.String(), "relay": s.src.cfg.Slot})
			}
			select {
			case <-time.After(s.src.cfg.Backoff(failures)):
			case <-s.ctx.Done():
				return // the next session reads it again
			}
		}
	}()
}

// moveToDeadLetters moves r's row to the dead letters by id, and tells
// whether a letter was written. When the row is gone from the table, the
// letter is written from what the stream carried, so nothing is skipped
// without one, unless the event has its letter already: a session killed
// after a move and before the slot confirmed the row's transaction has
// the next session stream the row again, gone because it was moved.
//
// The stream can show a transaction's commit before the snapshots of other
// connections see it (the server sends what is in the WAL; the transaction
// leaves the running ones a moment later): a move that finds nothing is
// tried again once the transaction is visible, and only then is the row
// taken for gone.
func (w *Source) moveToDeadLetters(ctx context.Context, row *walRow, reason string, attempts int) (bool, error) {
	t := outboxdb.New(w.cfg.Table, w.cfg.DeadLetterTable)
	moved, err := t.MoveToDeadLetters(ctx, w.cfg.DB, row.ID, reason, attempts)
	if err != nil || moved {
		return moved, wrapRelay(err)
	}
	if row.tx != nil && !row.tx.table {
		if err := w.waitVisible(ctx, row); err != nil {
			return false, err
		}
		if moved, err = t.MoveToDeadLetters(ctx, w.cfg.DB, row.ID, reason, attempts); err != nil || moved {
			return moved, wrapRelay(err)
		}
	}
	written, err := t.WriteDeadLetter(ctx, w.cfg.DB, outboxdb.CarriedRow{ID: row.ID, EventID: row.EventID,
		Name: row.Name, Version: row.Version, Topic: row.Topic, AggregateType: row.AggregateType,
		AggregateID: row.AggregateID, AggregateSeq: row.AggregateSeq, Payload: row.Payload, Headers: row.Headers},
		reason+" (the row was gone from the outbox table; written from the replication stream)", attempts)
	return written, wrapRelay(err)
}

// wrapRelay says err, when there is one, is the relay's.
func wrapRelay(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("relay: %w", err)
}

// walVisibleWait bounds moveToDeadLetters' wait for a committed
// transaction to become visible; past it the move fails and is tried
// again later.
const walVisibleWait = 10 * time.Second

// waitVisible waits until the transaction of row, committed in the stream,
// is visible to a new snapshot of the database's connections.
func (w *Source) waitVisible(ctx context.Context, row *walRow) error {
	// The stream numbers transactions in 32 bits; the database compares
	// them in 64 (with the epoch): widen it next to a recent one.
	var next uint64
	if err := w.cfg.DB.QueryRowContext(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).
		Scan(&next); err != nil {
		return fmt.Errorf("relay: reading the current transaction id: %w", err)
	}
	xid := fullXID(row.tx.xid, next)
	deadline := time.Now().Add(walVisibleWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		var visible bool
		if err := w.cfg.DB.QueryRowContext(ctx, `SELECT pg_visible_in_snapshot($1::text::xid8, pg_current_snapshot())`,
			strconv.FormatUint(xid, 10)).Scan(&visible); err != nil {
			return fmt.Errorf("relay: reading whether transaction %d of row %d is visible: %w", xid, row.ID, err)
		}
		if visible {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relay: row %d: its transaction %d, committed in the replication stream, "+
				"is still not visible to the database's connections after %s", row.ID, xid, walVisibleWait)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fullXID widens the 32-bit transaction id xid to the 64-bit one within
// 2^31 of next, a recent 64-bit id.
func fullXID(xid uint32, next uint64) uint64 {
	return uint64(int64(next) + int64(int32(xid-uint32(next))))
}

// ensureSlot creates the slot when absent, and records the boundary of
// what it streams (see recordSlotCreated). Creating a slot waits for the
// transactions running on the server to end.
func (w *Source) ensureSlot(ctx context.Context, conn *pgconn.PgConn) error {
	slot := w.cfg.Slot
	var plugin, database string
	err := w.cfg.DB.QueryRowContext(ctx, w.sql.SlotKind, slot).Scan(&plugin, &database)
	switch {
	case err == nil:
		var current string
		if err := w.cfg.DB.QueryRowContext(ctx, `SELECT current_database()`).Scan(&current); err != nil {
			return fmt.Errorf("relay: reading the database name: %w", err)
		}
		if plugin != "pgoutput" || database != current {
			return walFatal{fmt.Errorf("relay: replication slot %q exists but is not a pgoutput slot of database %q "+
				"(plugin %q, database %q): choose another Config.WAL.Slot", slot, current, plugin, database)}
		}
		return nil
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("relay: looking for replication slot %q: %w", slot, err)
	}
	w.cfg.Logger.Info("Creating the replication slot (this waits for the transactions running on the server to end)",
		watermill.LogFields{"slot": slot})
	if w.cfg.SlotCreating != nil {
		w.cfg.SlotCreating()
	}
	// A stop asked for meanwhile waits, for a minute at most, until the
	// slot exists and its start is recorded: a stop in between could leave
	// a slot whose start is not known, and then no row it delivers would
	// ever count as delivered.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	res, err := pglogrepl.CreateReplicationSlot(cctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			return nil // another relay created it meanwhile
		}
		return fmt.Errorf("relay: creating replication slot %q: %w", slot, err)
	}
	// The exported snapshot lives until the next command on conn.
	if err := w.recordSlotCreated(cctx, res.SnapshotName); err != nil {
		w.cfg.Logger.Error("Recording where the new slot starts failed; CleanupDelivered will not delete the rows it "+
			"delivers (they keep delivered_at NULL)", err, watermill.LogFields{"slot": slot})
	}
	return nil
}

// walRelation is the outbox table as the stream describes it: column
// positions by name.
type walRelation struct {
	cols map[string]int
}

// decode reads an outbox row from an insert's tuple (text format). What
// cannot be read makes the row malformed, with the reason.
func (rel *walRelation) decode(t *pglogrepl.TupleData) *walRow {
	r := &walRow{}
	var bad []string
	text := func(name string) (string, bool) {
		i, ok := rel.cols[name]
		if !ok || i >= len(t.Columns) || t.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return "", false
		}
		return string(t.Columns[i].Data), true
	}
	id, _ := text("id")
	var err error
	if r.ID, err = strconv.ParseInt(id, 10, 64); err != nil {
		bad = append(bad, "id "+strconv.Quote(id)+" is not a number")
	}
	if s, ok := text("event_id"); ok {
		if r.EventID, err = uuid.Parse(s); err != nil {
			bad = append(bad, "event_id "+strconv.Quote(s)+" is not a UUID")
		}
	}
	r.Name, _ = text("event_name")
	if s, ok := text("event_version"); ok {
		if r.Version, err = strconv.Atoi(s); err != nil {
			bad = append(bad, "event_version "+strconv.Quote(s)+" is not a number")
		}
	}
	r.Topic, _ = text("topic")
	r.AggregateType, _ = text("aggregate_type")
	r.AggregateID, _ = text("aggregate_id")
	if s, ok := text("payload"); ok {
		r.Payload = []byte(s)
	}
	if s, ok := text("headers"); ok {
		r.Headers = []byte(s)
	}
	if s, ok := text("readable_from"); ok {
		r.ReadableFrom, _ = strconv.Atoi(s)
	}
	if s, ok := text("aggregate_seq"); ok {
		r.AggregateSeq, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := text("created_at"); ok {
		if r.CreatedAt, err = parseTimestamptz(s); err != nil {
			bad = append(bad, "created_at "+strconv.Quote(s)+" is not a timestamp")
		}
	}
	r.Size = int64(len(r.Payload) + len(r.Headers))
	if len(bad) == 0 {
		if err := r.Check(); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		r.bad = errors.New(joinReasons(bad))
	}
	return r
}

func joinReasons(reasons []string) string {
	s := reasons[0]
	for _, r := range reasons[1:] {
		s += "; " + r
	}
	return s
}

// parseTimestamptz reads a timestamptz in PostgreSQL's ISO output.
func parseTimestamptz(s string) (time.Time, error) {
	var err error
	for _, layout := range []string{"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07:00:00"} {
		var t time.Time
		if t, err = time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}
