package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// pageNames are the templates in templates/, each rendered inside layout.html.
var pageNames = []string{"overview", "search", "event", "deadletters", "deadletter", "results", "login", "error", "tenants"}

func (c *Console) parseTemplates() error {
	c.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(c.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("console: parsing template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	return nil
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"base":     func() string { return c.cfg.BasePath },
		"root":     func() string { return c.root },
		"tenant":   func() string { return c.tenant },
		"tenants":  c.tenantsMode,
		"readOnly": func() bool { return c.cfg.ReadOnly },
		"authOn":   func() bool { return c.cfg.Token != "" },
		"when":     when,
		"ago":      ago,
		"dur":      func(d time.Duration) string { return roundDuration(d).String() },
		"short":    short,
		"list":     func(s ...string) []string { return s },
		"hasID":    func(id uuid.UUID) bool { return id != uuid.Nil },
	}
}

// view is what every page template gets: the page's data and the request's.
type view struct {
	Title   string
	Nav     string
	CSRF    string
	Refresh int // seconds; 0 for none
	Data    any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, data any) {
	c.renderView(w, r, name, status, view{Data: data})
}

func (c *Console) renderView(w http.ResponseWriter, r *http.Request, name string, status int, v view) {
	v.CSRF = sessionOf(r.Context()).csrf
	if v.Title == "" {
		v.Title = name
	}
	if v.Nav == "" {
		v.Nav = name
	}
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, v); err != nil {
		c.log.Error("console: rendering a page", "page", name, "error", err)
		http.Error(w, "console: rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows err on an error page; status 500 unless it is the user's.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		c.log.Error("console: a page failed", "path", r.URL.Path, "error", err)
	}
	c.renderView(w, r, "error", status, view{Title: "error", Nav: "-", Data: err.Error()})
}

func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05.000 UTC")
	case *time.Time:
		if v == nil {
			return "—"
		}
		return when(*v)
	}
	return fmt.Sprint(t)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return roundDuration(time.Since(t)).String() + " ago"
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d > time.Hour:
		return d.Round(time.Minute)
	case d > time.Minute:
		return d.Round(time.Second)
	case d > time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// short cuts s to n runes on one line, for a table cell.
func short(n int, s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// prettyJSON indents b when it is JSON, or says what it is: the template
// shows the result as text, never as markup.
func prettyJSON(b []byte) (text string, isJSON bool) {
	if len(b) == 0 {
		return "", false
	}
	var out bytes.Buffer
	if json.Valid(b) && json.Indent(&out, b, "", "  ") == nil {
		return out.String(), true
	}
	if utf8.Valid(b) {
		return string(b), false
	}
	return strconv.QuoteToASCII(string(b)), false
}
