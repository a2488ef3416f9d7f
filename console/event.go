package console

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

type eventPage struct {
	EventID uuid.UUID
	Row     *outboxdb.Row // nil when the outbox no longer holds it
	// Scheduled is the event's row in the scheduled events' table, while
	// it waits to be due or once cancelled; nil otherwise.
	Scheduled *outboxdb.ScheduledRow
	// DueAt is when a scheduled event was due: its scheduled row's
	// deliver_at, or the header the relay wrote when it moved it to the
	// outbox; zero for an event sent when emitted.
	DueAt       time.Time
	Letters     []admin.DeadLetter
	Processed   []processedBy
	Story       []storyStep
	Payload     string
	PayloadJSON bool
	Headers     string
	Name        string
	Version     int
	Topic       string
	Aggregate   string
	State       string
}

type processedBy struct {
	Consumer    string
	ProcessedAt time.Time
	Attempts    int
}

type storyStep struct {
	At      time.Time
	Untimed bool // At only places the step: no time of its own is recorded
	What    string
	Detail  string
	Letter  int64 // the dead letter this step is about; 0 for none
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not an event id (a UUID)", r.PathValue("id")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	p, err := c.readEvent(ctx, id)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if p.Row == nil && p.Scheduled == nil && len(p.Letters) == 0 && len(p.Processed) == 0 {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no event %s: not in the outbox (a relay with --delete-delivered, or retention, removes delivered rows), the scheduled events, the dead letters or the processed events", id))
		return
	}
	c.renderView(w, r, "event", http.StatusOK, view{Title: "event " + id.String(), Nav: "search", Data: p})
}

// readEvent gathers everything the tables know of event id: its outbox
// row (the unique index on event_id), delivered by whichever path did,
// its dead letters (their event_id index; retried_event_id by a scan of
// the dead letters, a small table) and the consumers that processed it
// (one probe of the (consumer, event_id) index per consumer).
func (c *Console) readEvent(ctx context.Context, id uuid.UUID) (eventPage, error) {
	p := eventPage{EventID: id}
	delivery, err := c.tables.ReadDelivery(ctx, c.cfg.DB)
	if err != nil {
		return p, fmt.Errorf("console: %w", err)
	}
	row, err := c.tables.ReadRowOfEvent(ctx, c.cfg.DB, delivery, id, false)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return p, fmt.Errorf("console: %w", err)
	default:
		p.Row = &row
	}
	if p.Row == nil {
		// Not in the outbox: it may wait to be due, or be cancelled.
		sr, err := c.tables.ReadScheduledOfEvent(ctx, c.cfg.DB, id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return p, fmt.Errorf("console: %w", err)
		default:
			p.Scheduled, p.DueAt = &sr, sr.DeliverAt
		}
	}
	letters, err := c.tables.ReadLettersOfEvent(ctx, c.cfg.DB, id)
	if err != nil {
		return p, fmt.Errorf("console: %w", err)
	}
	for _, d := range letters {
		p.Letters = append(p.Letters, admin.DeadLetter(d))
	}
	if p.Processed, err = c.processedBy(ctx, id); err != nil {
		return p, err
	}
	var payload, headers []byte
	switch {
	case p.Row != nil:
		payload, headers = p.Row.Payload, p.Row.Headers
		p.Name, p.Version, p.Topic, p.Aggregate = p.Row.EventName, p.Row.EventVersion, p.Row.Topic, p.Row.AggregateType+" "+p.Row.AggregateID
	case p.Scheduled != nil:
		sr := p.Scheduled
		payload, headers = sr.Payload, sr.Headers
		p.Name, p.Version, p.Topic, p.Aggregate = sr.EventName, sr.EventVersion, sr.Topic, sr.AggregateType+" "+sr.AggregateID
	case len(p.Letters) > 0:
		d := p.Letters[len(p.Letters)-1]
		payload, headers = d.Payload, d.Headers
		p.Name, p.Version, p.Topic, p.Aggregate = d.EventName, d.EventVersion, d.Topic, d.AggregateType+" "+d.AggregateID
	}
	if p.DueAt.IsZero() {
		p.DueAt = dueAt(headers)
	}
	p.Payload, p.PayloadJSON = prettyJSON(payload)
	p.Headers, _ = prettyJSON(headers)
	p.Story, p.State = story(p)
	return p, nil
}

func (c *Console) processedBy(ctx context.Context, id uuid.UUID) ([]processedBy, error) {
	rows, err := outboxdb.BoundSQL(c.cfg.DB, c.tables.Dialect).QueryContext(ctx, processedByQuery(c.tables), id)
	if err != nil {
		return nil, fmt.Errorf("console: reading who processed event %s: %w", id, err)
	}
	defer rows.Close()
	var out []processedBy
	for rows.Next() {
		var b processedBy
		if err := rows.Scan(&b.Consumer, &b.ProcessedAt, &b.Attempts); err != nil {
			return nil, fmt.Errorf("console: reading who processed event %s: %w", id, err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// dueAt is the due time the relay wrote into the headers of a scheduled
// event it moved to the outbox; zero for none, or one it cannot read.
func dueAt(headers []byte) time.Time {
	var h map[string]string
	if json.Unmarshal(headers, &h) != nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, h[events.MetaDeliverAt])
	return t
}

// story puts what happened to the event in time order, and says where it
// stands.
func story(p eventPage) ([]storyStep, string) {
	var s []storyStep
	state := "unknown"
	if sr := p.Scheduled; sr != nil {
		s = append(s, storyStep{At: sr.CreatedAt, What: "emitted for later", Detail: "scheduled for " + when(sr.DeliverAt)})
		if sr.CancelledAt != nil {
			s = append(s, storyStep{At: *sr.CancelledAt, What: "cancelled", Detail: "it will never be sent"})
			state = "cancelled at " + when(*sr.CancelledAt) + " (was scheduled for " + when(sr.DeliverAt) + ")"
		} else {
			state = "scheduled for " + when(sr.DeliverAt)
		}
	}
	if o := p.Row; o != nil {
		if p.DueAt.IsZero() {
			s = append(s, storyStep{At: o.CreatedAt, What: "emitted", Detail: fmt.Sprintf("outbox row %d", o.ID)})
		} else {
			// Emitted earlier, for later: its row was written when the relay
			// moved it, once due.
			s = append(s, storyStep{At: p.DueAt, What: "due", Detail: "the time it was scheduled for"},
				storyStep{At: o.CreatedAt, What: "moved to the outbox", Detail: fmt.Sprintf("outbox row %d", o.ID)})
		}
		switch {
		case o.DeliveredAt != nil:
			s = append(s, storyStep{At: *o.DeliveredAt, What: "delivered to the broker", Detail: fmt.Sprintf("after %d failed attempts", o.Attempts)})
			state = "delivered"
		case o.Delivered:
			// The WAL path records which transactions it delivered, not
			// when each row went.
			s = append(s, storyStep{At: o.CreatedAt, Untimed: true, What: "delivered to the broker",
				Detail: "by the WAL path, which records no time per row"})
			state = "delivered"
		default:
			detail := fmt.Sprintf("%d failed attempts so far", o.Attempts)
			if o.LastError != "" {
				detail += "; last error: " + o.LastError
			}
			s = append(s, storyStep{At: o.AvailableAt, What: "pending: next try", Detail: detail})
			state = "pending"
		}
	}
	for _, d := range p.Letters {
		s = append(s, storyStep{At: d.CreatedAt, What: "dead-lettered by " + d.Source,
			Detail: fmt.Sprintf("after %d attempts: %s", d.Attempts, d.Reason), Letter: d.ID})
		if d.RetriedAt != nil {
			s = append(s, storyStep{At: *d.RetriedAt, What: "retried", Detail: fmt.Sprintf("dead letter %d went back to the outbox", d.ID), Letter: d.ID})
		}
		if d.DiscardedAt != nil {
			s = append(s, storyStep{At: *d.DiscardedAt, What: "discarded", Detail: d.DiscardNote, Letter: d.ID})
		}
		if d.State() == admin.StateOpen {
			state = "dead letter open"
		}
	}
	for _, b := range p.Processed {
		s = append(s, storyStep{At: b.ProcessedAt, What: "processed by " + b.Consumer, Detail: fmt.Sprintf("on try %d", b.Attempts)})
	}
	if p.Row == nil && state == "unknown" && len(p.Processed) > 0 {
		state = "delivered (the outbox row is gone)"
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].At.Before(s[j].At) })
	return s, state
}

// processedByQuery probes the (consumer, event_id) index once per
// consumer, the names found by a loose scan of the same index.
func processedByQuery(t outboxdb.Tables) string { return outboxdb.ConsoleProcessedBy.SQL(t) }

// Late is how long after its due time a scheduled event was delivered
// (the fast path's delivered_at); 0 when either is unknown.
func (p eventPage) Late() time.Duration {
	if p.Row == nil || p.Row.DeliveredAt == nil || p.DueAt.IsZero() {
		return 0
	}
	return max(p.Row.DeliveredAt.Sub(p.DueAt), 0)
}
