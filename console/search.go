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
	t := pgsql.QuoteIdent(c.tables.Outbox)
	delivery, err := c.tables.ReadDelivery(ctx, c.cfg.DB)
	if err != nil {
		return searchPlan{}, fmt.Errorf("console: %w", err)
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	from, err := parseWhen(q.From)
	if err != nil {
		return searchPlan{}, formError("from: " + err.Error())
	}
	to, err := parseWhen(q.To)
	if err != nil {
		return searchPlan{}, formError("to: " + err.Error())
	}
	// The id range: ids grow with created_at, so a time range is an id
	// range found by a bounded search on the primary key.
	var lo, hi int64 // ids in [lo, hi); 0 for no bound
	if !from.IsZero() {
		if lo, err = c.firstIDAt(ctx, from); err != nil {
			return searchPlan{}, err
		}
		where = append(where, "created_at >= "+arg(from))
	}
	if !to.IsZero() {
		if hi, err = c.firstIDAt(ctx, to); err != nil {
			return searchPlan{}, err
		}
		where = append(where, "created_at < "+arg(to))
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

	indexed := false
	if q.AggregateID != "" || q.AggregateType != "" {
		ix, err := c.findAggregateIndex(ctx)
		if err != nil {
			return searchPlan{}, err
		}
		switch {
		case q.AggregateID == "":
			where = append(where, "aggregate_type = "+arg(q.AggregateType))
			if ix.onType {
				indexed = true
				p.Notes = append(p.Notes, "Aggregate type: index "+ix.name)
			}
		case ix.onID != "":
			where = append(where, "aggregate_id = "+arg(q.AggregateID))
			if q.AggregateType != "" {
				where = append(where, "aggregate_type = "+arg(q.AggregateType))
			}
			indexed = true
			p.Notes = append(p.Notes, "Aggregate id: index "+ix.onID)
		case ix.name != "" && q.AggregateType != "":
			where = append(where, "aggregate_type = "+arg(q.AggregateType), "aggregate_id = "+arg(q.AggregateID))
			indexed = true
			p.Notes = append(p.Notes, "Aggregate: index "+ix.name)
		case ix.name != "":
			// Every aggregate type, by a loose scan of the same index.
			types, err := c.aggregateTypes(ctx)
			if err != nil {
				return searchPlan{}, err
			}
			where = append(where, "aggregate_type = ANY("+arg(types)+")", "aggregate_id = "+arg(q.AggregateID))
			indexed = true
			p.Notes = append(p.Notes, fmt.Sprintf("Aggregate: index %s, once per aggregate type (%d)", ix.name, len(types)))
		default:
			where = append(where, "aggregate_id = "+arg(q.AggregateID))
			if q.AggregateType != "" {
				where = append(where, "aggregate_type = "+arg(q.AggregateType))
			}
		}
	}
	if q.Event != "" {
		where = append(where, "event_name = "+arg(q.Event))
	}
	if q.Topic != "" {
		where = append(where, "topic = "+arg(q.Topic))
	}
	if lo > 0 {
		where = append(where, "id >= "+arg(lo))
	}
	if hi > 0 {
		where = append(where, "id < "+arg(hi))
	}
	// Without an index for the filters, walk the primary key from the
	// bound the page starts at (back from the upper one, or up from
	// After), scanBound ids at most.
	var scanLo, scanHi int64
	filtered := q.AggregateID != "" || q.AggregateType != "" || q.Event != "" || q.Topic != ""
	if filtered && !indexed {
		top := hi
		if top == 0 {
			if err := c.cfg.DB.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) + 1 FROM `+t).Scan(&top); err != nil {
				return searchPlan{}, fmt.Errorf("console: reading the newest id: %w", err)
			}
		}
		switch {
		case q.After > 0 && lo+c.scanBound < top:
			scanHi = lo + c.scanBound
			where = append(where, "id < "+arg(scanHi))
		case q.After == 0 && top-c.scanBound > lo:
			scanLo = top - c.scanBound
			where = append(where, "id >= "+arg(scanLo))
		}
		note := fmt.Sprintf("No index serves this search: a bounded scan of the primary key over at most %s ids", thousands(c.scanBound))
		if q.AggregateID != "" {
			note += "; to search all history by aggregate, add CREATE INDEX CONCURRENTLY " +
				pgsql.QuoteIdent(c.tables.Outbox+"_aggregate") + " ON " + t + " (aggregate_type, aggregate_id)"
		}
		p.Notes = append(p.Notes, note)
	}
	if !filtered {
		p.Notes = append(p.Notes, "Primary key, newest first")
	}
	sqlText := `SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, created_at,
		delivered_at, ` + delivery.Delivered("o") + `, attempts, coalesce(last_error, '') FROM ` + t + ` o`
	if len(where) > 0 {
		sqlText += " WHERE " + strings.Join(where, " AND ")
	}
	order := " ORDER BY id DESC"
	if q.After > 0 {
		order = " ORDER BY id"
	}
	sqlText += order + " LIMIT " + strconv.Itoa(searchLimit+1)
	return searchPlan{sql: sqlText, args: args, scanLo: scanLo, scanHi: scanHi}, nil
}

// firstIDAt is the first id whose row was written at or after t (or one
// past the last id), by a binary search on the primary key: a probe per
// halving, each an index lookup.
func (c *Console) firstIDAt(ctx context.Context, at time.Time) (int64, error) {
	db, t := c.cfg.DB, pgsql.QuoteIdent(c.tables.Outbox)
	var lo, hi sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT min(id), max(id) FROM `+t).Scan(&lo, &hi); err != nil {
		return 0, fmt.Errorf("console: reading the id range: %w", err)
	}
	if !lo.Valid {
		return 1, nil
	}
	a, b := lo.Int64, hi.Int64+1 // the answer is in [a, b]
	for a < b {
		mid := a + (b-a)/2
		var (
			id      int64
			created time.Time
		)
		err := db.QueryRowContext(ctx, `SELECT id, created_at FROM `+t+` WHERE id >= $1 ORDER BY id LIMIT 1`, mid).Scan(&id, &created)
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
	rows, err := c.cfg.DB.QueryContext(ctx, `SELECT i.relname, array_to_string(array_agg(a.attname ORDER BY k.ord), ',')
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
		WHERE x.indrelid = to_regclass($1) AND x.indisvalid AND x.indpred IS NULL
		GROUP BY i.relname ORDER BY i.relname`, pgsql.QuoteIdent(c.tables.Outbox))
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
	t := pgsql.QuoteIdent(c.tables.Outbox)
	rows, err := c.cfg.DB.QueryContext(ctx, `WITH RECURSIVE types AS (
			(SELECT aggregate_type FROM `+t+` ORDER BY aggregate_type LIMIT 1)
			UNION ALL
			SELECT (SELECT o.aggregate_type FROM `+t+` o WHERE o.aggregate_type > types.aggregate_type ORDER BY o.aggregate_type LIMIT 1)
			FROM types WHERE types.aggregate_type IS NOT NULL
		) SELECT aggregate_type FROM types WHERE aggregate_type IS NOT NULL`)
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
