package console

import (
	"crypto/rand"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Console.
type Config struct {
	// DB holds the outbox: database/sql with the pgx driver, or MySQL's
	// (package mysqldb), where the overview, each event's page and the
	// dead letters are served and the event search is not yet.
	DB *sql.DB
	// Table is the outbox table, as the relay's Config.Table names it;
	// schema.OutboxTable when empty. The tables the relay names after it
	// (the WAL path's progress among them) follow it.
	Table string
	// DeadLetterTable is the dead-letter table; schema.DeadLetterTable
	// when empty.
	DeadLetterTable string
	// ScheduledTable is the scheduled events' table;
	// schema.ScheduledEventTable when empty. Without it the console shows
	// no scheduled events.
	ScheduledTable string
	// Token, when set, is required of every request (Bearer, basic auth
	// password or the login form). Empty: only loopback hosts are served.
	Token string
	// ReadOnly hides retry and discard and refuses them.
	ReadOnly bool
	// BasePath is the path the console is mounted under, e.g. "/outbox"
	// with http.StripPrefix("/outbox", h); "" at the root.
	BasePath string
	// Refresh is how often the overview reloads itself; 5 s when zero,
	// never when negative.
	Refresh time.Duration
	// LoginAttempts is how many failed token attempts (the login form, a
	// Bearer token or basic auth) a client address may make in a minute:
	// past them it is refused (429) until the minute ends. 10 when zero;
	// no limit when negative. The address is the connection's (an IPv6
	// one's /64): behind a proxy every client shares the proxy's.
	LoginAttempts int
	// Secret signs session cookies and CSRF tokens; random when empty,
	// which ends the sessions when the process restarts. Give the
	// replicas behind one load balancer the same.
	Secret []byte
	// Logger receives the errors of failed pages; slog.Default when nil.
	Logger *slog.Logger

	// Tenants, instead of DB, makes a console of the tenants of a relay
	// fleet: a page of every tenant's backlog, and each tenant's pages
	// under /t/{tenant}/. It is called on every request for the current
	// tenants (the command re-reads the databases file).
	Tenants func() ([]Tenant, error)
	// Open opens a tenant's pool on its URL (its schema as search_path);
	// pgdial (the pgx driver) when nil.
	Open func(databaseURL string) (*sql.DB, error)
	// TenantConnections bounds each tenant's pool, opened when one of its
	// pages is asked for; DefaultTenantConnections when zero.
	TenantConnections int
	// TenantIdle closes a tenant's pool once none of its pages was asked
	// for that long (and its idle connections after as long);
	// DefaultTenantIdle when zero.
	TenantIdle time.Duration
}

// Console is the web console, an http.Handler.
type Console struct {
	cfg    Config
	admin  *admin.Admin
	tables outboxdb.Tables
	pages  map[string]*template.Template
	mux    *http.ServeMux
	log    *slog.Logger
	logins *loginLimit
	// tenant names the tenant of a tenant's console, root the prefix of
	// the console of tenants serving it (BasePath otherwise).
	tenant, root string
	pools        tenantPools // a console of tenants' consoles of each

	scanBound int64 // scanBound; a test lowers it
}

// New returns the console of the outbox tables cfg names in cfg.DB.
func New(cfg Config) (*Console, error) {
	if cfg.Tenants != nil {
		if err := checkTenantsConfig(&cfg); err != nil {
			return nil, err
		}
	} else if cfg.DB == nil {
		return nil, errors.New("console: Config.DB is nil")
	}
	cfg.BasePath = strings.TrimRight(cfg.BasePath, "/")
	if cfg.BasePath != "" && !strings.HasPrefix(cfg.BasePath, "/") {
		return nil, fmt.Errorf("console: BasePath %q must start with /", cfg.BasePath)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = 5 * time.Second
	}
	if len(cfg.Secret) == 0 {
		cfg.Secret = make([]byte, 32)
		if _, err := rand.Read(cfg.Secret); err != nil {
			return nil, fmt.Errorf("console: making a session secret: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LoginAttempts == 0 {
		cfg.LoginAttempts = defaultLoginAttempts
	}
	tables := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	if cfg.ScheduledTable != "" {
		tables.Scheduled = cfg.ScheduledTable
	}
	if err := outboxdb.CheckName(tables.Outbox); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	var a *admin.Admin
	if cfg.DB != nil {
		var err error
		if a, err = admin.Open(cfg.DB, admin.Tables{Outbox: cfg.Table, DeadLetters: cfg.DeadLetterTable,
			Scheduled: cfg.ScheduledTable}); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		tables.Dialect = outboxdb.DialectOfDB(cfg.DB)
	}
	c := &Console{cfg: cfg, admin: a, tables: tables, log: cfg.Logger, root: cfg.BasePath,
		logins: newLoginLimit(cfg.LoginAttempts), scanBound: scanBound}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServer(http.FS(static))))
	m.HandleFunc("GET /login", c.loginForm)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	c.mux = m
	if c.tenantsMode() {
		c.tenantRoutes(m)
		return
	}
	m.HandleFunc("GET /{$}", c.overview)
	m.HandleFunc("GET /events", c.onPostgres(c.search))
	m.HandleFunc("GET /events/{id}", c.event)
	m.HandleFunc("GET /dead-letters", c.deadLetters)
	m.HandleFunc("GET /dead-letters/{id}", c.deadLetter)
	m.HandleFunc("POST /dead-letters/retry", c.action(c.retry))
	m.HandleFunc("POST /dead-letters/discard", c.action(c.discard))
}

// ServeHTTP authenticates r, gives it a session and serves it.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make a browser send "Origin: null"
	h.Set("Cache-Control", "no-store")
	if c.cfg.Token == "" && !loopbackHost(r.Host) {
		http.Error(w, "console: without a token the console answers only loopback hosts (localhost, 127.0.0.1, [::1]); "+
			"start it with --token to serve "+r.Host, http.StatusForbidden)
		return
	}
	s := c.session(w, r)
	if c.cfg.Token != "" && !s.authed && triesToken(r) {
		// Refused before the token is compared: the limit bounds the
		// guesses.
		if wait := c.logins.wait(clientAddr(r)); wait > 0 {
			tooManyAttempts(w, wait)
			return
		}
	}
	if c.cfg.Token != "" && !s.authed && !c.tokenInHeader(r) && !isLoginPath(r) {
		if hasCredentials(r) {
			c.logins.failed(clientAddr(r))
		}
		c.refuseUnauthenticated(w, r)
		return
	}
	if r.Method == http.MethodPost && !c.validCSRF(r, s) {
		http.Error(w, "console: this form has no valid CSRF token; reload the page and try again", http.StatusForbidden)
		return
	}
	c.mux.ServeHTTP(w, r.WithContext(withSession(r.Context(), s)))
}

// triesToken tells r presents a token: in its headers, or to the login
// form.
func triesToken(r *http.Request) bool {
	return hasCredentials(r) || r.Method == http.MethodPost && r.URL.Path == "/login"
}

func hasCredentials(r *http.Request) bool { return r.Header.Get("Authorization") != "" }

func isLoginPath(r *http.Request) bool {
	return r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
}

// refuseUnauthenticated sends a browser to the login form and anything
// else a 401.
func (c *Console) refuseUnauthenticated(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, c.cfg.BasePath+"/login?next="+urlQueryEscape(c.cfg.BasePath+r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="entoutbox console", Basic realm="entoutbox console"`)
	http.Error(w, "console: a token is required (Authorization: Bearer, basic auth, or log in)", http.StatusUnauthorized)
}

// onPostgres wraps a page whose reads are PostgreSQL's alone: on another
// database it says so.
func (c *Console) onPostgres(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.tables.Dialect != outboxdb.Postgres {
			c.fail(w, r, http.StatusNotImplemented, fmt.Errorf("console: the event search reads PostgreSQL; on %s not "+
				"yet (the overview, each event's page and the dead letters are served)", c.tables.Dialect))
			return
		}
		h(w, r)
	}
}

// action wraps a POST handler that changes dead letters: refused when
// read-only.
func (c *Console) action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.ReadOnly {
			http.Error(w, "console: read-only; retry and discard are turned off", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}
