package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// patience bounds each wait for what a broker, a relay or PostgreSQL will
// do (a delivery, a dead letter, a start or stop): a liveness bound, not a
// speed limit. A passing test waits only as long as the work takes; on a
// loaded 2-core machine that is ten times as long as on an idle one.
const patience = 3 * time.Minute

// env is one test's outbox, in its own schema, and its console.
type env struct {
	db     *pgtest.DB
	ent    *ent.Client
	srv    *httptest.Server
	tables admin.Tables // as the console's Config names them
}

func setup(t *testing.T, cfg console.Config) *env {
	t.Helper()
	db := pgtest.New(t)
	e := &env{db: db, ent: ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))),
		tables: admin.Tables{Outbox: cfg.Table, DeadLetters: cfg.DeadLetterTable}}
	pgtest.Migrate(t, e.ent.Schema.Create)
	cfg.DB = db.DB
	c, err := console.New(cfg)
	require.NoError(t, err)
	e.srv = httptest.NewServer(c)
	t.Cleanup(e.srv.Close)
	return e
}

// emit writes events to the console's outbox table as Emit does, and
// returns their ids.
func (e *env) emit(t *testing.T, topic, aggregateType, aggregateID, payload string, n int) []uuid.UUID {
	t.Helper()
	rows := make([]outbox.Row, n)
	ids := make([]uuid.UUID, n)
	for i := range rows {
		ids[i] = uuid.New()
		rows[i] = outbox.Row{EventID: ids[i], Headers: map[string]string{"correlation_id": "c-" + aggregateID},
			Event: outbox.Event{Name: "order.paid", Version: 1, Topic: topic, AggregateType: aggregateType,
				AggregateID: aggregateID, Payload: []byte(payload)}}
	}
	table := e.tables.Outbox
	if table == "" {
		table = schema.OutboxTable
	}
	q, args, err := outbox.InsertQuery(table, rows)
	require.NoError(t, err)
	_, err = e.db.DB.Exec(q, args...)
	require.NoError(t, err)
	return ids
}

// relayLetter writes a dead letter as the relay does when it gives up:
// the row leaves the outbox for the dead letters.
func (e *env) relayLetter(t *testing.T, topic, payload string) *ent.DeadLetter {
	t.Helper()
	d, err := e.ent.DeadLetter.Create().SetEventID(uuid.New()).SetSource("relay").SetEventName("order.paid").
		SetEventVersion(1).SetTopic(topic).SetAggregateType("Order").SetAggregateID("42").
		SetPayload([]byte(payload)).SetHeaders([]byte(`{"correlation_id":"c-42"}`)).
		SetReason("publishing: the broker refused the message: no route").SetAttempts(5).Save(context.Background())
	require.NoError(t, err)
	return d
}

// reload reads the dead letter id again, as admin reads it.
func (e *env) reload(t *testing.T, id int64) admin.DeadLetter {
	t.Helper()
	a, err := admin.Open(e.db.DB, e.tables)
	require.NoError(t, err)
	d, err := a.DeadLetterByID(context.Background(), id)
	require.NoError(t, err, "the dead letter must still exist")
	return d
}

// browserClient is an HTTP client keeping cookies, as a browser does.
func browserClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, c, req)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, c, req)
}

func do(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" (?:value|content)="([^"]+)"`)

// csrfOf is the CSRF token in a page's form.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "the page has no CSRF field")
	return m[1]
}
