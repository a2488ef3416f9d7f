package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// sessionCookie names the cookie holding "sid.authed.expiry.mac": the
// session id, whether it logged in with the token, when it ends, and their
// HMAC under Config.Secret. Browsers share cookies across the ports of a
// host, so the port is in the name: two consoles on one machine keep
// their sessions apart.
func sessionCookie(r *http.Request) string {
	name := "entoutbox_console"
	if _, port, err := net.SplitHostPort(r.Host); err == nil && port != "" && strings.Trim(port, "0123456789") == "" {
		name += "_" + port
	}
	return name
}

// sessionTTL bounds a session's life.
const sessionTTL = 12 * time.Hour

type session struct {
	id     string
	authed bool
	csrf   string
}

type sessionKey struct{}

func withSession(ctx context.Context, s session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

func sessionOf(ctx context.Context) session {
	s, _ := ctx.Value(sessionKey{}).(session)
	return s
}

func (c *Console) mac(parts ...string) string {
	m := hmac.New(sha256.New, c.cfg.Secret)
	m.Write([]byte(strings.Join(parts, "|")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session reads r's session cookie, or starts a session and sets one.
func (c *Console) session(w http.ResponseWriter, r *http.Request) session {
	if ck, err := r.Cookie(sessionCookie(r)); err == nil {
		if p := strings.Split(ck.Value, "."); len(p) == 4 {
			if hmac.Equal([]byte(p[3]), []byte(c.mac("session", p[0], p[1], p[2]))) {
				if exp, err := time.Parse("20060102150405", p[2]); err == nil && time.Now().Before(exp) {
					return session{id: p[0], authed: p[1] == "1", csrf: c.mac("csrf", p[0])}
				}
			}
		}
	}
	return c.startSession(w, r, false)
}

func (c *Console) startSession(w http.ResponseWriter, r *http.Request, authed bool) session {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s := session{id: hex.EncodeToString(b), authed: authed}
	s.csrf = c.mac("csrf", s.id)
	flag := "0"
	if authed {
		flag = "1"
	}
	exp := time.Now().Add(sessionTTL).UTC().Format("20060102150405")
	path := c.cfg.BasePath
	if path == "" {
		path = "/"
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie(r), Value: strings.Join([]string{s.id, flag, exp, c.mac("session", s.id, flag, exp)}, "."),
		Path: path, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL.Seconds())})
	return s
}

// tokenInHeader tells r carries the token as a Bearer token or as the
// password of basic auth.
func (c *Console) tokenInHeader(r *http.Request) bool {
	if c.cfg.Token == "" {
		return false
	}
	if _, pass, ok := r.BasicAuth(); ok {
		return c.isToken(pass)
	}
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return c.isToken(strings.TrimSpace(t))
	}
	return false
}

func (c *Console) isToken(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(c.cfg.Token)) == 1
}

// validCSRF tells r's form carries the session's CSRF token, and that a
// browser sending an Origin sends this host's.
func (c *Console) validCSRF(r *http.Request, s session) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(s.csrf))
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", http.StatusOK, loginPage{Next: safeNext(r.URL.Query().Get("next"), c.cfg.BasePath), Enabled: c.cfg.Token != ""})
}

type loginPage struct {
	Next    string
	Enabled bool
	Failed  bool
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"), c.cfg.BasePath)
	if c.cfg.Token == "" || !c.isToken(r.PostFormValue("token")) {
		if c.cfg.Token != "" {
			c.logins.failed(clientAddr(r))
		}
		c.render(w, r, "login", http.StatusUnauthorized, loginPage{Next: next, Enabled: c.cfg.Token != "", Failed: c.cfg.Token != ""})
		return
	}
	c.startSession(w, r, true) // a new id: a session fixed before login is not carried over
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	c.startSession(w, r, false)
	http.Redirect(w, r, c.cfg.BasePath+"/login", http.StatusSeeOther)
}

// safeNext keeps a redirect after login on the console.
func safeNext(next, base string) string {
	if next == "" || !strings.HasPrefix(next, base+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) {
		return base + "/"
	}
	return next
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// loopbackHost tells the Host header names this machine: localhost or a
// loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListenCheck refuses to serve addr (host:port) without a token unless
// its host is a loopback address or localhost: the console shows payloads
// and retries events.
func ListenCheck(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: address %q: %w", addr, err)
	}
	if token != "" {
		return nil
	}
	if host == "" {
		return errors.New("console: address " + addr + " listens on every interface; give a loopback host (127.0.0.1:8080) or set --token")
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("console: address %s is not a loopback address; anyone who reaches it could read payloads and retry events: set --token (or bind 127.0.0.1)", addr)
	}
	return nil
}
