package console

import (
	"context"
	"database/sql"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

type overviewPage struct {
	Status    admin.Status
	Age       time.Duration
	Chart     rateChart
	Consumers []consumerActivity
	Letters   []letterSource
}

// letterSource is one source's open dead letters, as the overview lists
// them: its most frequent reasons, and what the others hold.
type letterSource struct {
	admin.SourceLetters
	Top                      []admin.ReasonCount
	MoreLetters, MoreReasons int64
}

// letterSources groups the summary's reasons under their sources.
func letterSources(dl admin.DeadLetterSummary) []letterSource {
	out := make([]letterSource, 0, len(dl.Sources))
	for _, src := range dl.Sources {
		l := letterSource{SourceLetters: src, MoreLetters: src.Open}
		for _, r := range dl.ByReason {
			if r.Source == src.Source {
				l.Top = append(l.Top, r)
				l.MoreLetters -= r.Count
			}
		}
		l.MoreReasons = src.Reasons - int64(len(l.Top))
		out = append(out, l)
	}
	return out
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	st, err := admin.ReadTablesStatus(ctx, c.cfg.DB, admin.Tables{Outbox: c.tables.Outbox,
		DeadLetters: c.tables.DeadLetters, Scheduled: c.tables.Scheduled})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	p := overviewPage{Status: st, Age: st.Age(), Letters: letterSources(st.DeadLetters)}
	if p.Chart, err = c.readDeliveryRate(ctx); err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if p.Consumers, err = readConsumers(ctx, c.cfg.DB, c.tables); err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	refresh := 0
	if c.cfg.Refresh > 0 {
		refresh = int((c.cfg.Refresh + time.Second - 1) / time.Second)
	}
	c.renderView(w, r, "overview", http.StatusOK, view{Title: "overview", Refresh: refresh, Data: p})
}

// The delivery-rate chart: rows delivered in the last rateWindow, in
// rateBucket buckets, read from delivered_at of the rows written since
// rateLookback ago: all of them, a range of the primary key, when they are
// at most rateSamples, else every stride-th id (one primary-key lookup
// each) with the counts scaled up. A relay that deletes delivered rows
// (--delete-delivered) or the WAL path (which does not write delivered_at)
// leaves nothing to count.
const (
	rateWindow   = 10 * time.Minute
	rateBucket   = 10 * time.Second
	rateLookback = time.Hour
	rateSamples  = 20_000
)

type rateChart struct {
	Buckets []float64 // events per second, oldest first
	Max     float64
	Total   int64 // delivered in the window (estimated when Stride > 1)
	Stride  int64 // 1 when every row was counted
	SVG     template.HTML
}

func (c *Console) readDeliveryRate(ctx context.Context) (rateChart, error) {
	db := outboxdb.BoundSQL(c.cfg.DB, c.tables.Dialect)
	n := int(rateWindow / rateBucket)
	ch := rateChart{Buckets: make([]float64, n), Stride: 1}
	var hi sql.NullInt64
	if err := db.QueryRowContext(ctx, outboxdb.ConsoleMaxID.SQL(c.tables)).Scan(&hi); err != nil {
		return ch, fmt.Errorf("console: reading the delivery rate: %w", err)
	}
	if !hi.Valid {
		ch.SVG = barChart(ch.Buckets, 0)
		return ch, nil
	}
	lo, err := c.firstIDAt(ctx, time.Now().Add(-rateLookback))
	if err != nil {
		return ch, err
	}
	query := deliveryRateQuery(c.tables)
	if span := hi.Int64 - lo + 1; span > rateSamples {
		ch.Stride = (span + rateSamples - 1) / rateSamples
		query = sampledDeliveryRateQuery(c.tables)
	}
	rows, err := db.QueryContext(ctx, query, lo, hi.Int64, ch.Stride, rateBucket.Seconds(), rateWindow.Seconds())
	if err != nil {
		return ch, fmt.Errorf("console: reading the delivery rate: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			b     int
			count int64
		)
		if err := rows.Scan(&b, &count); err != nil {
			return ch, fmt.Errorf("console: reading the delivery rate: %w", err)
		}
		if b < 0 || b >= n {
			continue
		}
		count *= ch.Stride
		ch.Buckets[n-1-b] = float64(count) / rateBucket.Seconds()
		ch.Total += count
	}
	if err := rows.Err(); err != nil {
		return ch, fmt.Errorf("console: reading the delivery rate: %w", err)
	}
	for _, v := range ch.Buckets {
		ch.Max = max(ch.Max, v)
	}
	ch.SVG = barChart(ch.Buckets, ch.Max)
	return ch, nil
}

// barChart draws values as an SVG bar chart; only numbers go into it.
func barChart(values []float64, top float64) template.HTML {
	const w, h, pad = 600.0, 120.0, 2.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="delivered per second">`, w, h+14, w, h+14)
	fmt.Fprintf(&b, `<line x1="0" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999" stroke-width="1"/>`, h, w, h)
	if top > 0 {
		bw := w / float64(len(values))
		for i, v := range values {
			bh := v / top * (h - 4)
			if v > 0 && bh < 1 {
				bh = 1
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3b7dd8"><title>%.1f/s</title></rect>`,
				float64(i)*bw+pad/2, h-bh, bw-pad, bh, v)
		}
	}
	fmt.Fprintf(&b, `<text x="0" y="%.0f" font-size="11" fill="#666">-%s</text>`, h+12, rateWindow)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" fill="#666" text-anchor="end">now</text>`, w, h+12)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and constants only
}

// consumerActivity is what one consumer processed lately.
type consumerActivity struct {
	Name          string
	LastMinute    int64
	LastProcessed time.Time // zero when nothing in the last minute
}

// readConsumers lists the consumers with processed events and what each
// processed in the last minute. The names come from a loose scan of the
// (consumer, event_id) index, one probe per consumer; the counts from a
// range of the processed_at index.
func readConsumers(ctx context.Context, db *sql.DB, t outboxdb.Tables) ([]consumerActivity, error) {
	rows, err := outboxdb.BoundSQL(db, t.Dialect).QueryContext(ctx, consumersQuery(t))
	if err != nil {
		return nil, fmt.Errorf("console: reading the consumers: %w", err)
	}
	defer rows.Close()
	var out []consumerActivity
	for rows.Next() {
		var (
			a    consumerActivity
			last sql.NullTime
		)
		if err := rows.Scan(&a.Name, &a.LastMinute, &last); err != nil {
			return nil, fmt.Errorf("console: reading the consumers: %w", err)
		}
		a.LastProcessed = last.Time
		out = append(out, a)
	}
	return out, rows.Err()
}

// deliveryRateQuery reads every id of [$1, $2] ($3 is 1): a range of the
// primary key.
func deliveryRateQuery(t outboxdb.Tables) string { return outboxdb.ConsoleDeliveryRate.SQL(t) }

// sampledDeliveryRateQuery reads every $3-th id of [$1, $2]: a primary-key
// lookup each.
func sampledDeliveryRateQuery(t outboxdb.Tables) string {
	return outboxdb.ConsoleDeliveryRateSampled.SQL(t)
}

// consumersQuery reads the names by a loose scan of the (consumer,
// event_id) index, the last minute by a range of the processed_at index.
func consumersQuery(t outboxdb.Tables) string { return outboxdb.ConsoleConsumers.SQL(t) }
