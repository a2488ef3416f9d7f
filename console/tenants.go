package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/tenantread"
)

// A console of tenants (Config.Tenants) shows the tenants of a relay
// fleet's databases file: a page listing each tenant's backlog, and under
// /t/{tenant}/ the pages of one tenant's outbox (overview, events, dead
// letters), as the console of its database alone would show them. A
// tenant's pool is opened when one of its pages is asked for, bounded to
// Config.TenantConnections, and closed once its pages were not asked for
// Config.TenantIdle. Every page, the tenants' too, asks for the token and
// the CSRF token as the console of one database does.

// Tenant is one tenant of a console of tenants: the entry of the relay
// fleet's databases file (package relay/fleet).
type Tenant struct {
	Name        string
	DatabaseURL string
	// Schema, when set, holds the tenant's outbox tables: the search_path
	// of its connections.
	Schema string
}

// url is where the tenant's pool connects: its URL with its schema as
// the search_path, as its relay connects.
func (t Tenant) url() string {
	if t.Schema == "" {
		return t.DatabaseURL
	}
	return pgsql.WithSearchPath(t.DatabaseURL, t.Schema)
}

// Defaults of a console of tenants.
const (
	DefaultTenantConnections = 2
	DefaultTenantIdle        = 5 * time.Minute
	// tenantsReadTimeout bounds the read of one database URL's tenants
	// on the tenants page.
	tenantsReadTimeout = 10 * time.Second
	// tenantsRefreshFloor is the least time between two reloads of the
	// tenants page, which reads every tenant.
	tenantsRefreshFloor = 15 * time.Second
)

// checkTenantsConfig sets the defaults of a console of tenants.
func checkTenantsConfig(cfg *Config) error {
	if cfg.DB != nil {
		return errors.New("console: Config.DB and Config.Tenants are both set; give one database or the tenants")
	}
	if cfg.TenantConnections < 0 || cfg.TenantIdle < 0 {
		return errors.New("console: Config.TenantConnections and TenantIdle must not be negative")
	}
	if cfg.TenantConnections == 0 {
		cfg.TenantConnections = DefaultTenantConnections
	}
	if cfg.TenantIdle == 0 {
		cfg.TenantIdle = DefaultTenantIdle
	}
	if cfg.Open == nil {
		cfg.Open = func(u string) (*sql.DB, error) {
			return pgdial.Open(u, pgdial.Options{ApplicationName: "entoutbox console"})
		}
	}
	return nil
}

func (c *Console) tenantRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /{$}", c.tenantsPage)
	m.HandleFunc("GET /t/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, c.cfg.BasePath+"/t/"+url.PathEscape(r.PathValue("tenant"))+"/", http.StatusSeeOther)
	})
	m.HandleFunc("/t/{tenant}/{rest...}", c.tenantPage)
}

// tenantRow is one tenant on the tenants page.
type tenantRow struct {
	Name   string
	Schema string
	tenantread.Backlog
	Error string
}

type tenantsPageData struct {
	Tenants []tenantRow
	Read    int
	At      time.Time
}

// tenantsPage lists every tenant with its backlog, read per database URL
// on one connection (the schemas of a URL together), or the error that
// stopped its read.
func (c *Console) tenantsPage(w http.ResponseWriter, r *http.Request) {
	tenants, err := c.cfg.Tenants()
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("console: the tenants: %w", err))
		return
	}
	rows := make([]tenantRow, len(tenants))
	byURL := map[string][]int{}
	var urls []string
	for i, t := range tenants {
		rows[i] = tenantRow{Name: t.Name, Schema: t.Schema}
		if byURL[t.DatabaseURL] == nil {
			urls = append(urls, t.DatabaseURL)
		}
		byURL[t.DatabaseURL] = append(byURL[t.DatabaseURL], i)
	}
	for _, u := range urls {
		idx := byURL[u]
		schemas := make([]string, len(idx))
		for j, i := range idx {
			schemas[j] = tenants[i].Schema
		}
		reads, err := c.readTenants(r.Context(), u, schemas)
		for j, i := range idx {
			if err == nil {
				rows[i].Backlog = reads[j]
			} else {
				rows[i].Backlog = tenantread.Backlog{Err: err}
			}
		}
	}
	data := tenantsPageData{Tenants: rows, At: time.Now()}
	for i := range data.Tenants {
		if err := data.Tenants[i].Err; err != nil {
			data.Tenants[i].Error = err.Error()
		} else {
			data.Read++
		}
	}
	refresh := 0
	if c.cfg.Refresh > 0 {
		refresh = int((max(c.cfg.Refresh, tenantsRefreshFloor) + time.Second - 1) / time.Second)
	}
	c.renderView(w, r, "tenants", http.StatusOK, view{Title: "tenants", Nav: "tenants", Refresh: refresh, Data: data})
}

// readTenants reads the backlog of schemas of database databaseURL on one
// connection opened for it.
func (c *Console) readTenants(ctx context.Context, databaseURL string, schemas []string) ([]tenantread.Backlog, error) {
	ctx, cancel := context.WithTimeout(ctx, tenantsReadTimeout)
	defer cancel()
	db, err := c.cfg.Open(databaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	return tenantread.ReadDatabase(ctx, db, c.tables, schemas, 0)
}

// tenantPage serves a page of one tenant's console: its own pages under
// its prefix; login and logout are the console's.
func (c *Console) tenantPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("tenant")
	tenants, err := c.cfg.Tenants()
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("console: the tenants: %w", err))
		return
	}
	i := slices.IndexFunc(tenants, func(t Tenant) bool { return t.Name == name })
	if i < 0 {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("console: no tenant %q in the databases file", name))
		return
	}
	rest := "/" + r.PathValue("rest")
	switch rest {
	case "/logout":
		if r.Method == http.MethodPost {
			c.logout(w, r)
			return
		}
	case "/login":
		http.Redirect(w, r, c.cfg.BasePath+"/login", http.StatusSeeOther)
		return
	}
	tc, release, err := c.pools.get(c, tenants[i])
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, fmt.Errorf("console: tenant %s: %w", name, err))
		return
	}
	defer release()
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = rest, ""
	tc.mux.ServeHTTP(w, r2)
}

// tenantPools holds the consoles of the tenants whose pages were asked
// for, each on a pool of its own, until they were not asked for
// TenantIdle.
type tenantPools struct {
	mu      sync.Mutex
	byName  map[string]*tenantConsole
	retired []*tenantConsole // replaced while in use: closed once done
}

type tenantConsole struct {
	tenant  Tenant
	db      *sql.DB
	console *Console
	inUse   int
	used    time.Time
}

// get is tenant t's console, opened when none is, and the function to call
// when done with it.
func (p *tenantPools) get(parent *Console, t Tenant) (*Console, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeIdle(parent.cfg.TenantIdle)
	tc := p.byName[t.Name]
	if tc != nil && tc.tenant != t { // its entry changed in the file
		p.retire(tc)
		tc = nil
	}
	if tc == nil {
		var err error
		if tc, err = openTenant(parent, t); err != nil {
			return nil, nil, err
		}
		if p.byName == nil {
			p.byName = map[string]*tenantConsole{}
		}
		p.byName[t.Name] = tc
	}
	tc.inUse++
	return tc.console, func() { p.release(tc) }, nil
}

func (p *tenantPools) release(tc *tenantConsole) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tc.inUse--
	tc.used = time.Now()
	if tc.inUse == 0 && slices.Contains(p.retired, tc) {
		p.retired = slices.DeleteFunc(p.retired, func(x *tenantConsole) bool { return x == tc })
		_ = tc.db.Close()
	}
}

// retire drops tc from the tenants, closing its pool now or when its last
// page is served.
func (p *tenantPools) retire(tc *tenantConsole) {
	delete(p.byName, tc.tenant.Name)
	if tc.inUse == 0 {
		_ = tc.db.Close()
		return
	}
	p.retired = append(p.retired, tc)
}

// closeIdle closes the pools of the tenants whose pages were not asked
// for idle.
func (p *tenantPools) closeIdle(idle time.Duration) {
	for _, tc := range p.byName {
		if tc.inUse == 0 && time.Since(tc.used) >= idle {
			p.retire(tc)
		}
	}
}

// open is the number of pools open (for tests).
func (p *tenantPools) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byName) + len(p.retired)
}

// openTenant opens t's pool, bounded, and its console under the parent's
// prefix /t/{name}.
func openTenant(parent *Console, t Tenant) (*tenantConsole, error) {
	db, err := parent.cfg.Open(t.url())
	if err != nil {
		return nil, err
	}
	n := parent.cfg.TenantConnections
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(parent.cfg.TenantIdle)
	cfg := parent.cfg
	cfg.DB, cfg.Tenants, cfg.BasePath = db, nil, parent.cfg.BasePath+"/t/"+t.Name
	tc, err := New(cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	tc.tenant, tc.root = t.Name, parent.cfg.BasePath
	return &tenantConsole{tenant: t, db: db, console: tc, used: time.Now()}, nil
}

// tenantsMode tells c is a console of tenants, not of one database.
func (c *Console) tenantsMode() bool { return c.cfg.Tenants != nil }
