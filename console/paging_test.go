package console

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// Following Older from the first page, then Newer back, visits every
// event the search selects once each way, in order, also where the scan
// without an index stops at its bound and the page says so.
func TestSearchPagesBothWaysThroughABoundedScan(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	// 600 rows, of which ids 1-150 and 451-600 are order.paid, every
	// third of those order.refunded: the rows between hold none, which a
	// scan of 100 ids crosses only page by page.
	_, err := db.DB.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload)
		SELECT gen_random_uuid(), CASE WHEN g BETWEEN 151 AND 450 THEN 'other' WHEN g % 3 = 0 THEN 'order.refunded'
			ELSE 'order.paid' END, 1, 'orders', 'Order', g::text, '{}'
		FROM generate_series(1, 600) g ORDER BY g`)
	require.NoError(t, err)
	var want []int64
	rows, err := db.DB.QueryContext(ctx, `SELECT id FROM outbox_events WHERE event_name = 'order.paid' ORDER BY id DESC`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 200)

	c, err := New(Config{DB: db.DB})
	require.NoError(t, err)
	c.scanBound = 100
	page := func(q eventQuery) searchPage {
		t.Helper()
		p := searchPage{Query: q}
		require.NoError(t, c.findEvents(ctx, q, &p))
		return p
	}
	follow := func(link string) eventQuery {
		t.Helper()
		path, query, ok := strings.Cut(link, "?")
		require.True(t, ok, link)
		require.Equal(t, "/events", path)
		v, err := url.ParseQuery(query)
		require.NoError(t, err)
		require.Equal(t, "order.paid", v.Get("event"), "the link keeps the search")
		return eventQueryOf(v)
	}
	ids := func(p searchPage) []int64 {
		var out []int64
		for _, r := range p.Results {
			out = append(out, r.ID)
		}
		return out
	}

	// Down: newest first, page after page, to the end.
	var (
		seen  []int64
		pages []searchPage
		q     = eventQuery{Event: "order.paid"}
		stops int
	)
	for range 50 {
		p := page(q)
		if pages == nil {
			require.Empty(t, p.Newer, "the first page has no Newer")
		} else {
			require.NotEmpty(t, p.Newer, "a page below the first links back up")
		}
		pages = append(pages, p)
		seen = append(seen, ids(p)...)
		for _, n := range p.Notes {
			if strings.Contains(n, "older events were not searched") {
				stops++
			}
		}
		if p.Older == "" {
			break
		}
		q = follow(string(p.Older))
	}
	require.Equal(t, want, seen, "every event once, newest first")
	require.Positive(t, stops, "the scan stopped at its bound, and the page said so")

	// Up again, from the last page.
	last := pages[len(pages)-1]
	up, stops := ids(last), 0
	for p := last; p.Newer != ""; {
		p = page(follow(string(p.Newer)))
		up = append(ids(p), up...)
		for _, n := range p.Notes {
			if strings.Contains(n, "newer events were not searched") {
				stops++
			}
		}
	}
	require.Equal(t, want, up, "every event once, back to the newest")
	require.Positive(t, stops, "the scan up stopped at its bound, and the page said so")
}
