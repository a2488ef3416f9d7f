package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/broker"
)

// newLogger is a text logger to stderr for the broker and library, from
// level on, redacting the passwords of URLs and connection strings.
func newLogger(level string) (watermill.LoggerAdapter, error) {
	_, l, err := newLoggers(os.Stderr, level, "text", newRedactor())
	return l, err
}

// newLoggers returns the command's logger, writing to w in format ("text"
// or "json") from level on, and the same logger for the relay and broker
// (Watermill's adapter). Every record passes through r: no password of
// the URLs it was given, nor of any URL or connection string in the text,
// is written.
func newLoggers(w io.Writer, level, format string, r redactor) (*slog.Logger, watermill.LoggerAdapter, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: r.attr}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	logger := slog.New(h)
	return logger, watermill.NewSlogLogger(logger), nil
}

// redactor cuts passwords out of what is logged: those of the URLs the
// command was given, wherever they appear (a client library may quote
// them), and that of any URL or key=value connection string in the text.
type redactor struct {
	secrets []string
}

const redactedMark = "xxxxx"

// newRedactor knows the passwords of urls (empty ones are skipped).
func newRedactor(urls ...string) redactor {
	var r redactor
	add := func(s string) {
		if len(s) >= 3 { // shorter would cut unrelated text; the URL rules still apply
			r.secrets = append(r.secrets, s)
		}
	}
	for _, raw := range urls {
		if raw == "" {
			continue
		}
		if m := dsnPassword.FindAllStringSubmatch(raw, -1); m != nil {
			for _, sub := range m {
				add(strings.Trim(sub[2], "'"))
			}
		}
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if p, ok := u.User.Password(); ok {
			add(p)
			add(url.QueryEscape(p))
			add(url.PathEscape(p))
		}
		for _, p := range u.Query()["password"] {
			add(p)
			add(url.QueryEscape(p))
		}
	}
	return r
}

var (
	// anyURL finds URLs in text, to redact each as broker.Redacted does.
	anyURL = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)
	// dsnPassword finds the password of a key=value connection string.
	dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)
)

// String returns s without passwords.
func (r redactor) String(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redactedMark)
	}
	s = anyURL.ReplaceAllStringFunc(s, broker.Redacted)
	return dsnPassword.ReplaceAllString(s, "${1}"+redactedMark)
}

// Error returns err with its text redacted, nil for nil; errors.Is and
// errors.As still see the original.
func (r redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	if msg := r.String(err.Error()); msg != err.Error() {
		return &redactedError{msg: msg, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// attr redacts each attribute of a record, its message included. A nil
// error (Watermill logs one with every Error call that has none) is
// dropped.
func (r redactor) attr(_ []string, a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); r.String(s) != s {
			return slog.String(a.Key, r.String(s))
		}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case nil:
			if a.Key == "error" {
				return slog.Attr{}
			}
		case error:
			return slog.String(a.Key, r.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, r.String(x.String()))
		default:
			// Anything else is printed as it would be, and replaced only
			// when that text holds a password.
			if s := fmt.Sprint(x); r.String(s) != s {
				return slog.String(a.Key, r.String(s))
			}
		}
	}
	return a
}
