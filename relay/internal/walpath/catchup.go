package walpath

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// A slot streams the transactions that commit after its start; those that
// committed before (visible in the snapshot the slot exported when it was
// created, kept as <table>_wal_progress.created) it never streams. Their
// rows still pending (delivered_at NULL: written before the relay's first
// start, while no relay ran, or left by another path) the relay sends
// itself, at the start of every session, before any row of the stream:
// in id order, one row per aggregate at a time, through the engine as the
// stream's rows go. The stream is read meanwhile into its window, and
// held there, so an aggregate's old rows go out before its new ones.
//
// A batch of them is marked delivered (delivered_at, as the fast path
// marks its rows) once every row of it is acked or dead-lettered; the
// next batch goes out after. A relay killed midway sends the unmarked
// batch again, in the same order: duplicates, never a gap or an aggregate
// out of order. Marked rows count as delivered for status and cleanup.
// Once none is left, a session's catch-up is one query.

// catchUp sends the rows the slot's start left behind, and tells whether
// the session may go on to the stream's (false: it ended meanwhile).
func (s *walSession) catchUp() bool {
	src := s.src
	slot := s.src.cfg.Slot
	var snap sql.NullString
	tables := outboxdb.New(src.cfg.Table, "")
	var d outboxdb.Delivery
	if !s.untilDone("reading where the slot starts", func(ctx context.Context) (err error) {
		if d, err = tables.ReadDelivery(ctx, src.cfg.DB); err != nil {
			return err
		}
		return src.cfg.DB.QueryRowContext(ctx, src.sql.SlotStart, slot).Scan(&snap)
	}) {
		return false
	}
	if !snap.Valid {
		src.cfg.Logger.Info("Where the slot starts is not recorded (it was made by an earlier version, or recording "+
			"it failed): rows written before it are not sent, and status counts those still pending",
			watermill.LogFields{"slot": slot})
		return true
	}
	var pending int64
	if !s.untilDone("counting the rows written before the slot's start", func(ctx context.Context) error {
		return src.cfg.DB.QueryRowContext(ctx, tables.PreSlotCount(d), snap.String, outboxdb.DefaultMaxRows).
			Scan(&pending)
	}) {
		return false
	}
	if pending == 0 {
		return true
	}
	fields := watermill.LogFields{"slot": slot, "rows": pending}
	if pending >= outboxdb.DefaultMaxRows {
		fields["rows"] = fmt.Sprintf("at least %d", pending)
	}
	src.cfg.Logger.Info("Sending the rows written before the replication slot's start (the stream does not carry "+
		"them), before the stream's", fields)
	var after, sent int64
	for {
		var rows []*walRow
		if !s.untilDone("reading the rows written before the slot's start", func(ctx context.Context) (err error) {
			rows, err = src.readPreSlot(ctx, d, snap.String, after)
			return err
		}) {
			return false
		}
		if len(rows) == 0 {
			break
		}
		if !s.sendBatch(rows) {
			return false
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		if !s.untilDone("marking the rows written before the slot's start delivered", func(ctx context.Context) error {
			_, err := src.cfg.DB.ExecContext(ctx, src.sql.MarkPreSlot, ids)
			return err
		}) {
			return false
		}
		after = rows[len(rows)-1].ID
		sent += int64(len(rows))
	}
	src.cfg.Logger.Info("Sent the rows written before the replication slot's start; streaming",
		watermill.LogFields{"slot": slot, "rows": sent})
	return true
}

// sendBatch has the engine publish rows as the stream's are (one per
// aggregate at a time, in id order, failures as the policy decides), and
// tells whether every one was acked or dead-lettered before the session
// ended.
func (s *walSession) sendBatch(rows []*walRow) bool {
	b := &walSession{src: s.src, e: s.e, w: newWALWindow(0), metrics: s.metrics, ctx: s.ctx,
		out: s.out, stat: s.stat, drain: true}
	b.w.beginTable()
	for _, r := range rows {
		if b.w.add(r) {
			b.deadLetter(r, engine.Malformed(r.bad.Error(), r.Attempts))
		}
	}
	b.w.commit(1)
	s.e.Run(s.ctx, b.next)
	if open, _ := b.w.counts(); open > 0 {
		b.w.stop() // the session ended: the next one sends the batch again
		return false
	}
	return true
}

// readPreSlot reads, in id order, the next batch after id after of the
// rows written before the start of the slot that exported snap: at most
// BatchSize rows, and no more bytes than MaxBytesInFlight past the first.
func (w *Source) readPreSlot(ctx context.Context, d outboxdb.Delivery, snap string, after int64) ([]*walRow, error) {
	rs, err := w.cfg.DB.QueryContext(ctx, outboxdb.New(w.cfg.Table, "").PreSlotRead(d), snap, after, w.cfg.BatchSize)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var (
		rows  []*walRow
		bytes int64
	)
	for rs.Next() {
		r := &walRow{}
		var payload, headers sql.NullString
		if err := rs.Scan(&r.ID, &r.EventID, &r.Name, &r.Version, &r.Topic, &r.AggregateType, &r.AggregateID,
			&payload, &headers, &r.CreatedAt, &r.Attempts, &r.ReadableFrom, &r.AggregateSeq); err != nil {
			return nil, err
		}
		if payload.Valid {
			r.Payload = []byte(payload.String)
		}
		if headers.Valid {
			r.Headers = []byte(headers.String)
		}
		r.Size = int64(len(r.Payload) + len(r.Headers))
		if len(rows) > 0 && bytes+r.Size > w.cfg.MaxBytesInFlight {
			break
		}
		bytes += r.Size
		if err := r.Check(); err != nil {
			r.bad = err
		}
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// untilDone runs fn until it succeeds, backing off after failures (logged
// the first times), and tells whether it did before the session ended.
func (s *walSession) untilDone(what string, fn func(context.Context) error) bool {
	for failures := 1; ; failures++ {
		err := fn(s.ctx)
		if err == nil {
			return true
		}
		if s.ctx.Err() != nil {
			return false
		}
		if failures <= 3 {
			s.src.cfg.Logger.Error("Sending the rows written before the replication slot's start: "+what+
				" failed; trying again", err, watermill.LogFields{"slot": s.src.cfg.Slot})
		}
		if !backoff.Sleep(s.ctx, backoff.Exponential(100*time.Millisecond, 5*time.Second, failures)) {
			return false
		}
	}
}
