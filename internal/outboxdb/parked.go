package outboxdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Parked is what a fleet asks of the outboxes of relays it stopped while
// they were idle: whether there is work again. One statement covers the
// outboxes of several schemas of one database, on one connection.

// Work is what one schema's outbox holds for a parked relay.
type Work struct {
	// Missing: the outbox table is not there; only a relay can say why.
	Missing bool
	// Waiting: an undelivered row, or a scheduled event due and not yet
	// moved into the outbox.
	Waiting bool
}

// qualify names table in schema; in the search_path when schema is "".
func qualify(schema, table string) string {
	if schema == "" {
		return pgsql.QuoteIdent(table)
	}
	return pgsql.QuoteIdent(schema) + "." + pgsql.QuoteIdent(table)
}

// parkedWork is the work of one schema: scheduled tells whether its
// scheduled table exists (a missing one has nothing due).
func parkedWork(t Tables, schema string, scheduled bool) string {
	o := qualify(schema, t.Outbox)
	q := `EXISTS (SELECT 1 FROM ` + o + ` o WHERE o.delivered_at IS NULL)`
	if scheduled {
		q += ` OR EXISTS (SELECT 1 FROM ` + qualify(schema, t.Scheduled) + ` s
		WHERE s.cancelled_at IS NULL AND s.deliver_at <= clock_timestamp()
		AND NOT EXISTS (SELECT 1 FROM ` + o + ` d WHERE d.event_id = s.event_id))`
	}
	return q
}

// The statements of one schema, in the search_path; ParkedWork builds the
// same over several schemas at once.
var (
	// parkedTables tells whether the outbox table and the scheduled table
	// exist.
	parkedTables = define("parked/tables", func(t Tables) string {
		return `SELECT to_regclass(` + pgsql.QuoteLiteral(qualify("", t.Outbox)) + `) IS NOT NULL, to_regclass(` +
			pgsql.QuoteLiteral(qualify("", t.Scheduled)) + `) IS NOT NULL`
	})
	// parkedWaiting tells whether the outbox holds work.
	parkedWaiting = define("parked/waiting", func(t Tables) string { return `SELECT ` + parkedWork(t, "", true) })
)

// ParkedWork reads the work of the outboxes t in each of schemas ("" for
// the connection's search_path) of the database q: two statements
// whatever the number of schemas. PostgreSQL only.
func (t Tables) ParkedWork(ctx context.Context, q Querier, schemas []string) ([]Work, error) {
	if len(schemas) == 0 {
		return nil, nil
	}
	exist := make([]string, 0, 2*len(schemas))
	for _, s := range schemas {
		exist = append(exist, `to_regclass(`+pgsql.QuoteLiteral(qualify(s, t.Outbox))+`) IS NOT NULL`,
			`to_regclass(`+pgsql.QuoteLiteral(qualify(s, t.Scheduled))+`) IS NOT NULL`)
	}
	found := make([]bool, len(exist))
	dst := make([]any, len(found))
	for i := range found {
		dst[i] = &found[i]
	}
	if err := queryRow(ctx, q, `SELECT `+strings.Join(exist, ", "), nil, dst...); err != nil {
		return nil, fmt.Errorf("looking for the outbox tables %s of %d schemas: %w", t.Outbox, len(schemas), err)
	}
	work := make([]Work, len(schemas))
	var cols []string
	var read []int // the schemas whose outbox exists, in the order of cols
	for i, s := range schemas {
		if !found[2*i] {
			work[i].Missing = true
			continue
		}
		cols = append(cols, `(`+parkedWork(t, s, found[2*i+1])+`) AS w`+strconv.Itoa(i))
		read = append(read, i)
	}
	if len(cols) == 0 {
		return work, nil
	}
	waiting := make([]bool, len(cols))
	dst = dst[:0]
	for i := range waiting {
		dst = append(dst, &waiting[i])
	}
	if err := queryRow(ctx, q, `SELECT `+strings.Join(cols, ", "), nil, dst...); err != nil {
		return nil, fmt.Errorf("reading the work waiting in the outboxes %s of %d schemas: %w", t.Outbox, len(cols), err)
	}
	for j, i := range read {
		work[i].Waiting = waiting[j]
	}
	return work, nil
}
