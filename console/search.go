package console

import (
	"context"
	"database/sql"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// scanBound is how many ids a search without an index for its filters
// walks back from its upper bound before it stops and says so.
const scanBound = 500_000

// searchLimit is how many events a page of results shows.
const searchLimit = 50

// eventQuery is the search form.
type eventQuery struct {
	EventID       string
	AggregateType string
	AggregateID   string
	Event         string
	Topic         string
	From, To      string
	// Paging: ids below Before, newest first, or the nearest ids above
	// After; 0 for no bound.
	Before, After int64
}

func (q eventQuery) empty() bool {
	return q.EventID == "" && q.AggregateID == "" && q.AggregateType == "" && q.Event == "" &&
		q.Topic == "" && q.From == "" && q.To == ""
}

func (q eventQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"event_id": q.EventID, "aggregate_type": q.AggregateType,
		"aggregate_id": q.AggregateID, "event": q.Event, "topic": q.Topic, "from": q.From, "to": q.To} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// eventRow is one outbox row in the results.
type eventRow struct {
	ID            int64
	EventID       uuid.UUID
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	CreatedAt     time.Time
	DeliveredAt   *time.Time
	Delivered     bool // by any path: the WAL path sets no DeliveredAt
	Attempts      int
	LastError     string
}

type searchPage struct {
	Query    eventQuery
	Results  []eventRow
	Searched bool
	Notes    []string // which index served the search, or the bounded scan
	Took     time.Duration
	// Older and Newer link the pages before and after this one; "" for
	// none.
	Older, Newer template.URL
	Problem      string // the form's error
}

// eventQueryOf reads the search form; before wins over after.
func eventQueryOf(f url.Values) eventQuery {
	q := eventQuery{EventID: strings.TrimSpace(f.Get("event_id")), AggregateType: strings.TrimSpace(f.Get("aggregate_type")),
		AggregateID: strings.TrimSpace(f.Get("aggregate_id")), Event: strings.TrimSpace(f.Get("event")),
		Topic: strings.TrimSpace(f.Get("topic")), From: strings.TrimSpace(f.Get("from")), To: strings.TrimSpace(f.Get("to"))}
	if b := f.Get("before"); b != "" {
		q.Before, _ = strconv.ParseInt(b, 10, 64)
	}
	if a := f.Get("after"); a != "" && q.Before <= 0 {
		q.After, _ = strconv.ParseInt(a, 10, 64)
	}
	q.Before, q.After = max(q.Before, 0), max(q.After, 0)
	return q
}

func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	q := eventQueryOf(r.URL.Query())
	p := searchPage{Query: q}
	if q.EventID != "" {
		id, err := uuid.Parse(q.EventID)
		if err != nil {
			p.Problem = fmt.Sprintf("%q is not an event id (a UUID)", q.EventID)
			c.renderView(w, r, "search", http.StatusBadRequest, view{Title: "events", Data: p})
			return
		}
		// The unique index on event_id, and the dead letters' and
		// processed events' indexes: the event page.
		http.Redirect(w, r, c.cfg.BasePath+"/events/"+id.String(), http.StatusSeeOther)
		return
	}
	if !q.empty() {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := c.findEvents(ctx, q, &p); err != nil {
			if fe, ok := err.(formError); ok {
				p.Problem = string(fe)
				c.renderView(w, r, "search", http.StatusBadRequest, view{Title: "events", Data: p})
				return
			}
			c.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		p.Searched, p.Took = true, time.Since(start)
	}
	c.renderView(w, r, "search", http.StatusOK, view{Title: "events", Nav: "search", Data: p})
}

// formError is a search the form got wrong.
type formError string

func (e formError) Error() string { return string(e) }

// findEvents runs q, newest first, and says in p.Notes how. It reads one
// row more than a page, to tell whether there is a page beyond.
func (c *Console) findEvents(ctx context.Context, q eventQuery, p *searchPage) error {
	plan, err := c.planSearch(ctx, q, p)
	if err != nil {
		return err
	}
	rows, err := c.cfg.DB.QueryContext(ctx, plan.sql, plan.args...)
	if err != nil {
		return fmt.Errorf("console: searching events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e eventRow
		if err := rows.Scan(&e.ID, &e.EventID, &e.Name, &e.Version, &e.Topic, &e.AggregateType, &e.AggregateID,
			&e.CreatedAt, &e.DeliveredAt, &e.Delivered, &e.Attempts, &e.LastError); err != nil {
			return fmt.Errorf("console: searching events: %w", err)
		}
		p.Results = append(p.Results, e)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("console: searching events: %w", err)
	}
	beyond := len(p.Results) > searchLimit
	if beyond {
		p.Results = p.Results[:searchLimit]
	}
	if q.After > 0 {
		slices.Reverse(p.Results) // read oldest first: the nearest above After
	}
	// The pages on either side: beyond the last result in the direction
	// read, or beyond where a bounded scan stopped; the other way, beyond
	// the first result (or the bound this page started from).
	var older, newer int64 // before older, after newer; 0 for no link
	switch {
	case q.After > 0:
		older = q.After + 1
		if len(p.Results) > 0 {
			older = p.Results[len(p.Results)-1].ID
			if beyond {
				newer = p.Results[0].ID
			}
		}
		if !beyond && plan.scanHi > 0 {
			newer = plan.scanHi - 1
			p.Notes = append(p.Notes, fmt.Sprintf("The scan stopped at id %d: newer events were not searched (see Newer)", plan.scanHi-1))
		}
	default:
		if beyond {
			older = p.Results[len(p.Results)-1].ID
		} else if plan.scanLo > 0 {
			older = plan.scanLo
			p.Notes = append(p.Notes, fmt.Sprintf("The scan stopped at id %d: older events were not searched (see Older)", plan.scanLo))
		}
		if q.Before > 0 {
			newer = q.Before - 1
			if len(p.Results) > 0 {
				newer = p.Results[0].ID
			}
		}
	}
	if older > 0 {
		p.Older = c.searchURL(q, "before", older)
	}
	if newer > 0 {
		p.Newer = c.searchURL(q, "after", newer)
	}
	return nil
}

// searchURL is the link to the search q from id on: key is before or
// after. It is a whole URL: a template escapes a query string written
// into an href after its "?" as a single value.
func (c *Console) searchURL(q eventQuery, key string, id int64) template.URL {
	v := q.values()
	v.Set(key, strconv.FormatInt(id, 10))
	return template.URL(c.cfg.BasePath + "/events?" + v.Encode()) // encoded by url.Values
}

// searchPlan is the statement of a search, and where a bounded scan stopped.
type searchPlan struct {
	sql  string
	args []any
	// The lowest id a bounded scan walking down reaches, or one past the
	// highest one walking up (after an id) reaches; 0 for none.
	scanLo, scanHi int64
}

// planSearch builds the statement of q and says in p.Notes what serves it.
func (c *Console) planSearch(ctx context.Context, q eventQuery, p *searchPage) (searchPlan, error) {
	delivery, err := c.tables.ReadDelivery(ctx, c.cfg.DB)
	if err != nil {
		return searchPlan{}, fmt.Errorf("console: %w", err)
	}
	var f outboxdb.EventFilter
	lo, hi, err := c.searchRange(ctx, q, &f, p)
	if err != nil {
		return searchPlan{}, err
	}
	indexed := false
	if q.AggregateID != "" || q.AggregateType != "" {
		if indexed, err = c.filterAggregate(ctx, q, &f, p); err != nil {
			return searchPlan{}, err
		}
	}
	if q.Event != "" {
		f.EventName(q.Event)
	}
	if q.Topic != "" {
		f.Topic(q.Topic)
	}
	if lo > 0 {
		f.IDFrom(lo)
	}
	if hi > 0 {
		f.IDBelow(hi)
	}
	var plan searchPlan
	filtered := q.AggregateID != "" || q.AggregateType != "" || q.Event != "" || q.Topic != ""
	if filtered && !indexed {
		if plan.scanLo, plan.scanHi, err = c.boundScan(ctx, q, lo, hi, &f, p); err != nil {
			return searchPlan{}, err
		}
	}
	if !filtered {
		p.Notes = append(p.Notes, "Primary key, newest first")
	}
	plan.sql, plan.args = c.tables.SearchEvents(delivery, f, q.After > 0, searchLimit+1)
	return plan, nil
}

// searchRange filters f by q's time range, and returns the ids in it,
// [lo, hi), narrowed to q's page (0 for no bound). Ids grow with
// created_at, so a time range is an id range found by a bounded search on
// the primary key.
func (c *Console) searchRange(ctx context.Context, q eventQuery, f *outboxdb.EventFilter, p *searchPage) (lo, hi int64, err error) {
	from, err := parseWhen(q.From)
	if err != nil {
		return 0, 0, formError("from: " + err.Error())
	}
	to, err := parseWhen(q.To)
	if err != nil {
		return 0, 0, formError("to: " + err.Error())
	}
	if !from.IsZero() {
		if lo, err = c.firstIDAt(ctx, from); err != nil {
			return 0, 0, err
		}
		f.CreatedFrom(from)
	}
	if !to.IsZero() {
		if hi, err = c.firstIDAt(ctx, to); err != nil {
			return 0, 0, err
		}
		f.CreatedBefore(to)
	}
	if q.Before > 0 && (hi == 0 || q.Before < hi) {
		hi = q.Before
	}
	if q.After > 0 && q.After+1 > lo {
		lo = q.After + 1
	}
	if !from.IsZero() || !to.IsZero() {
		p.Notes = append(p.Notes, "The time range is an id range found by a binary search on the primary key (ids grow with created_at)")
	}
	return lo, hi, nil
}

// filterAggregate filters f by q's aggregate through the best index there
// is, and tells whether one serves it.
func (c *Console) filterAggregate(ctx context.Context, q eventQuery, f *outboxdb.EventFilter, p *searchPage) (indexed bool, err error) {
	ix, err := c.findAggregateIndex(ctx)
	if err != nil {
		return false, err
	}
	switch {
	case q.AggregateID == "":
		f.AggregateType(q.AggregateType)
		if ix.onType {
			p.Notes = append(p.Notes, "Aggregate type: index "+ix.name)
		}
		return ix.onType, nil
	case ix.onID != "":
		f.AggregateID(q.AggregateID)
		if q.AggregateType != "" {
			f.AggregateType(q.AggregateType)
		}
		p.Notes = append(p.Notes, "Aggregate id: index "+ix.onID)
		return true, nil
	case ix.name != "" && q.AggregateType != "":
		f.AggregateType(q.AggregateType)
		f.AggregateID(q.AggregateID)
		p.Notes = append(p.Notes, "Aggregate: index "+ix.name)
		return true, nil
	case ix.name != "":
		// Every aggregate type, by a loose scan of the same index.
		types, err := c.aggregateTypes(ctx)
		if err != nil {
			return false, err
		}
		f.AggregateTypeIn(types)
		f.AggregateID(q.AggregateID)
		p.Notes = append(p.Notes, fmt.Sprintf("Aggregate: index %s, once per aggregate type (%d)", ix.name, len(types)))
		return true, nil
	}
	f.AggregateID(q.AggregateID)
	if q.AggregateType != "" {
		f.AggregateType(q.AggregateType)
	}
	return false, nil
}

// boundScan bounds a search no index serves: it walks the primary key from
// the bound the page starts at (back from the upper one, hi, or up from
// After), c.scanBound ids at most. It returns where the walk stops: the
// lowest id walking down, or one past the highest walking up; 0 for none.
func (c *Console) boundScan(ctx context.Context, q eventQuery, lo, hi int64, f *outboxdb.EventFilter, p *searchPage) (scanLo, scanHi int64, err error) {
	top := hi
	if top == 0 {
		if err := c.cfg.DB.QueryRowContext(ctx, outboxdb.ConsoleNewestID.SQL(c.tables)).Scan(&top); err != nil {
			return 0, 0, fmt.Errorf("console: reading the newest id: %w", err)
		}
	}
	switch {
	case q.After > 0 && lo+c.scanBound < top:
		scanHi = lo + c.scanBound
		f.IDBelow(scanHi)
	case q.After == 0 && top-c.scanBound > lo:
		scanLo = top - c.scanBound
		f.IDFrom(scanLo)
	}
	note := fmt.Sprintf("No index serves this search: a bounded scan of the primary key over at most %s ids", thousands(c.scanBound))
	if q.AggregateID != "" {
		note += "; to search all history by aggregate, add " + outboxdb.ConsoleAggregateIndex.SQL(c.tables)
	}
	p.Notes = append(p.Notes, note)
	return scanLo, scanHi, nil
}

// firstIDAt is the first id whose row was written at or after t (or one
// past the last id), by a binary search on the primary key: a probe per
// halving, each an index lookup.
func (c *Console) firstIDAt(ctx context.Context, at time.Time) (int64, error) {
	db := outboxdb.BoundSQL(c.cfg.DB, c.tables.Dialect)
	var lo, hi sql.NullInt64
	if err := db.QueryRowContext(ctx, outboxdb.ConsoleIDRange.SQL(c.tables)).Scan(&lo, &hi); err != nil {
		return 0, fmt.Errorf("console: reading the id range: %w", err)
	}
	if !lo.Valid {
		return 1, nil
	}
	a, b := lo.Int64, hi.Int64+1 // the answer is in [a, b]
	first := outboxdb.ConsoleFirstIDFrom.SQL(c.tables)
	for a < b {
		mid := a + (b-a)/2
		var (
			id      int64
			created time.Time
		)
		err := db.QueryRowContext(ctx, first, mid).Scan(&id, &created)
		if err == sql.ErrNoRows {
			b = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("console: finding the id written at %s: %w", at.Format(time.RFC3339), err)
		}
		if !created.Before(at) {
			b = mid // no ids between mid and id
		} else {
			a = id + 1
		}
	}
	return a, nil
}

// aggregateIndex is what the outbox's indexes offer a search by aggregate.
type aggregateIndex struct {
	onID   string // an index leading with aggregate_id
	name   string // an index leading with (aggregate_type, aggregate_id)
	onType bool   // name, or another index, leads with aggregate_type
}

// findAggregateIndex finds the valid, non-partial indexes of the outbox by
// their leading columns.
func (c *Console) findAggregateIndex(ctx context.Context) (aggregateIndex, error) {
	var ix aggregateIndex
	rows, err := c.cfg.DB.QueryContext(ctx, outboxdb.ConsoleOutboxIndexes.SQL(c.tables), pgsql.QuoteIdent(c.tables.Outbox))
	if err != nil {
		return ix, fmt.Errorf("console: reading the outbox's indexes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, cols string
		if err := rows.Scan(&name, &cols); err != nil {
			return ix, fmt.Errorf("console: reading the outbox's indexes: %w", err)
		}
		switch {
		case cols == "aggregate_id" || strings.HasPrefix(cols, "aggregate_id,"):
			if ix.onID == "" {
				ix.onID = name
			}
		case cols == "aggregate_type,aggregate_id" || strings.HasPrefix(cols, "aggregate_type,aggregate_id,"):
			if ix.name == "" {
				ix.name = name
			}
			ix.onType = true
		case cols == "aggregate_type" || strings.HasPrefix(cols, "aggregate_type,"):
			ix.onType = true
		}
	}
	return ix, rows.Err()
}

// aggregateTypes lists the aggregate types by a loose scan of the index on
// (aggregate_type, aggregate_id): one probe per type.
func (c *Console) aggregateTypes(ctx context.Context) ([]string, error) {
	rows, err := c.cfg.DB.QueryContext(ctx, outboxdb.ConsoleAggregateTypes.SQL(c.tables))
	if err != nil {
		return nil, fmt.Errorf("console: listing the aggregate types: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("console: listing the aggregate types: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// parseWhen reads a time as RFC 3339, the browser's datetime-local
// (taken as UTC), a date, or a duration ago (15m).
func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a time (2006-01-02T15:04, UTC, or RFC 3339) nor a duration ago (15m)", s)
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
