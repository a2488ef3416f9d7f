package console_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// fleetEnv is a console of tenants over schemas of the test's own: acme
// and globex with their outbox tables (globex named by a URL whose
// search_path is its schema), bare without them, and down whose database
// does not answer.
type fleetEnv struct {
	acme, globex *env
	srv          *httptest.Server
	app          string // the application_name of the tenants' pools
	mu           sync.Mutex
	tenants      []console.Tenant
}

func setupTenants(t *testing.T, cfg console.Config) *fleetEnv {
	t.Helper()
	f := &fleetEnv{app: "console-tenants-" + uuid.NewString()[:8]}
	newEnv := func(migrated bool) *env {
		db := pgtest.New(t)
		e := &env{db: db, ent: ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))}
		if migrated {
			pgtest.Migrate(t, e.ent.Schema.Create)
		}
		return e
	}
	f.acme, f.globex = newEnv(true), newEnv(true)
	bare := newEnv(false)
	f.tenants = []console.Tenant{
		{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: f.acme.db.Schema},
		{Name: "bare", DatabaseURL: pgtest.ServerURL(), Schema: bare.db.Schema},
		{Name: "down", DatabaseURL: "postgres://postgres@127.0.0.1:1/test?connect_timeout=5"},
		{Name: "globex", DatabaseURL: f.globex.db.URL},
	}
	cfg.Tenants = func() ([]console.Tenant, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return append([]console.Tenant(nil), f.tenants...), nil
	}
	cfg.Open = func(u string) (*sql.DB, error) {
		return pgdial.Open(u, pgdial.Options{ApplicationName: f.app})
	}
	c, err := console.New(cfg)
	require.NoError(t, err)
	f.srv = httptest.NewServer(c)
	t.Cleanup(f.srv.Close)
	return f
}

// connections is how many connections the tenants' pools hold on the
// server.
func (f *fleetEnv) connections(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.acme.db.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, f.app).Scan(&n))
	return n
}

// tenantRow is the cells of tenant name's row on the tenants page, as text.
func tenantRow(t *testing.T, page, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr id="tenant-` + name + `">(.*?)</tr>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no row of tenant %s in:\n%s", name, page)
	return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], " ")), " ")
}

// The tenants page shows each tenant's backlog, and why a tenant could
// not be read (no tables, database down) while the others are shown;
// each tenant's pages show its own outbox under /t/{tenant}/, and a
// tenant whose database is down shows its error there.
func TestTenantsPageAndATenantsPages(t *testing.T) {
	t.Parallel()
	f := setupTenants(t, console.Config{})
	f.acme.emit(t, "orders", "Order", "1", `{"order_id":1}`, 2)
	letter := f.acme.relayLetter(t, "orders", `{"order_id":42}`)
	f.globex.emit(t, "invoices", "Invoice", "9", `{"invoice_id":9}`, 3)
	client := browserClient(t)

	code, page := get(t, client, f.srv.URL+"/")
	require.Equal(t, http.StatusOK, code, page)
	assert.Regexp(t, `^acme schema \S+ 2 \S+ 1 0 read$`, tenantRow(t, page, "acme"))
	assert.Regexp(t, `^globex 3 \S+ 0 0 read$`, tenantRow(t, page, "globex"), "globex's URL sets its search_path")
	assert.Contains(t, tenantRow(t, page, "bare"), `outbox_events`, "bare's schema has no outbox table")
	assert.Contains(t, tenantRow(t, page, "down"), `127.0.0.1`, "down's database does not answer")
	assert.Contains(t, page, "2 of 4 read")

	code, page = get(t, client, f.srv.URL+"/t/acme/")
	require.Equal(t, http.StatusOK, code, page)
	assert.Contains(t, page, `id="pending">2<`)
	assert.Contains(t, page, `tenant acme`)
	assert.Contains(t, page, `href="/t/acme/dead-letters"`, "its links stay under its prefix")
	code, page = get(t, client, f.srv.URL+"/t/globex/")
	require.Equal(t, http.StatusOK, code, page)
	assert.Contains(t, page, `id="pending">3<`)
	code, page = get(t, client, f.srv.URL+"/t/acme/dead-letters")
	require.Equal(t, http.StatusOK, code, page)
	assert.Contains(t, page, "no route")
	code, page = get(t, client, f.srv.URL+"/t/acme/dead-letters/"+strconv.FormatInt(letter.ID, 10))
	require.Equal(t, http.StatusOK, code, page)
	code, page = get(t, client, f.srv.URL+"/t/globex/dead-letters/"+strconv.FormatInt(letter.ID, 10))
	require.Equal(t, http.StatusNotFound, code, "acme's dead letter is not globex's: %s", page)

	code, page = get(t, client, f.srv.URL+"/t/down/")
	require.GreaterOrEqual(t, code, 500)
	assert.Contains(t, page, "127.0.0.1", "the error names the database")
	code, page = get(t, client, f.srv.URL+"/t/nobody/")
	require.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, page, `no tenant &#34;nobody&#34;`)

	require.LessOrEqual(t, f.connections(t), 2*console.DefaultTenantConnections,
		"acme's and globex's pools, each bounded")
}

// A tenant's pool is bounded and closed once its pages were not asked
// for TenantIdle: its connections go back to the server.
func TestTenantPoolsCloseWhenIdle(t *testing.T) {
	t.Parallel()
	f := setupTenants(t, console.Config{TenantIdle: 300 * time.Millisecond, TenantConnections: 1})
	f.acme.emit(t, "orders", "Order", "1", `{"order_id":1}`, 1)
	client := browserClient(t)
	for _, p := range []string{"/t/acme/", "/t/acme/events", "/t/acme/dead-letters", "/t/globex/"} {
		code, page := get(t, client, f.srv.URL+p)
		require.Equal(t, http.StatusOK, code, page)
	}
	require.LessOrEqual(t, f.connections(t), 2, "one connection per tenant's pool")
	require.Eventually(t, func() bool { return f.connections(t) == 0 }, patience, 50*time.Millisecond,
		"the idle pools hold no connection")
}

// The tenants' pages ask for the token, and their actions for the CSRF
// token, as the console of one database does; a retry through a tenant's
// page acts in that tenant's database.
func TestTenantPagesNeedTokenAndCSRF(t *testing.T) {
	t.Parallel()
	f := setupTenants(t, console.Config{Token: "s3cret-token"})
	letter := f.acme.relayLetter(t, "orders", `{"order_id":42}`)
	anon := browserClient(t)
	for _, p := range []string{"/", "/t/acme/", "/t/acme/dead-letters", "/t/down/"} {
		code, _ := get(t, anon, f.srv.URL+p)
		require.Equal(t, http.StatusUnauthorized, code, "%s without the token", p)
	}
	code, _ := post(t, anon, f.srv.URL+"/t/acme/dead-letters/retry", url.Values{"id": {strconv.FormatInt(letter.ID, 10)}})
	require.Equal(t, http.StatusUnauthorized, code)

	auth := []string{"Authorization", "Bearer s3cret-token"}
	client := browserClient(t)
	id := strconv.FormatInt(letter.ID, 10)
	code, page := get(t, client, f.srv.URL+"/t/acme/dead-letters/"+id, auth...)
	require.Equal(t, http.StatusOK, code, page)
	code, _ = post(t, client, f.srv.URL+"/t/acme/dead-letters/retry", url.Values{"id": {id}}, auth...)
	require.Equal(t, http.StatusForbidden, code, "a retry without the CSRF token is refused")
	require.Equal(t, admin.StateOpen, f.acme.reload(t, letter.ID).State())

	code, page = post(t, client, f.srv.URL+"/t/acme/dead-letters/retry", url.Values{"id": {id}, "csrf": {csrfOf(t, page)}}, auth...)
	require.Equal(t, http.StatusOK, code, page)
	require.Equal(t, admin.StateRetried, f.acme.reload(t, letter.ID).State(), "retried in acme's database")
	var n int
	require.NoError(t, f.acme.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE event_id = $1`, letter.EventID).Scan(&n))
	require.Equal(t, 1, n, "the event is back in acme's outbox")
}

// In a browser: the tenants page links to a tenant's overview, which
// links back.
func TestBrowserOpensATenantFromTheTenantsPage(t *testing.T) {
	t.Parallel()
	f := setupTenants(t, console.Config{})
	f.globex.emit(t, "invoices", "Invoice", "9", `{"invoice_id":9}`, 4)
	ctx := tab(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(f.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#tenants"))))
	assert.Contains(t, text(t, ctx, "#tenant-down"), "127.0.0.1")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#tenant-globex a`))))
	waitFor(t, ctx, "#pending")
	assert.Equal(t, "4", text(t, ctx, "#pending"))
	assert.Equal(t, "tenant globex", text(t, ctx, "#tenant"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`nav a[href="/"]`))))
	waitFor(t, ctx, "#tenants")
}
