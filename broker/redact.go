package broker

import (
	"net/url"
	"regexp"
	"strings"
)

const redactedMark = "xxxxx"

// dsnPassword finds the password of a key=value connection string.
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// Redacted returns rawURL fit for logs and errors: the password of its user
// info and a "password" query parameter (as libpq and pgx accept) are
// replaced by "xxxxx". A URL that does not parse is redacted by hand.
func Redacted(rawURL string) string {
	if !strings.Contains(rawURL, "://") {
		// Not a URL; perhaps a libpq key=value string given by mistake.
		return dsnPassword.ReplaceAllString(rawURL, "${1}"+redactedMark)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return redactUnparsed(rawURL)
	}
	changed := false
	if q := u.Query(); q.Has("password") {
		q.Set("password", redactedMark)
		u.RawQuery = q.Encode()
		changed = true
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redactedMark)
		changed = true
	}
	if !changed {
		return rawURL // re-encoding would alter it, e.g. "mem://" into "mem:"
	}
	return u.String()
}

// redactUnparsed hides the password of a URL url.Parse rejected.
func redactUnparsed(raw string) string {
	i, j := passwordSpan(raw)
	if i < 0 {
		return raw
	}
	return raw[:i] + redactedMark + raw[j:]
}

// passwordSpan finds by hand the password of raw, between the first ":" and
// the last "@" of its authority, as raw[i:j]; i is -1 when there is none.
func passwordSpan(raw string) (i, j int) {
	start := strings.Index(raw, "://")
	if start < 0 {
		return -1, -1
	}
	start += 3
	end := len(raw)
	if k := strings.IndexAny(raw[start:], "/?#"); k >= 0 {
		end = start + k
	}
	authority := raw[start:end]
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return -1, -1
	}
	colon := strings.Index(authority[:at], ":")
	if colon < 0 || colon+1 == at {
		return -1, -1
	}
	return start + colon + 1, start + at
}

// secretsOf lists the passwords rawURL carries, raw and decoded, so that they
// can be cut out of error text a client library built from the URL.
func secretsOf(rawURL string) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		if i, j := passwordSpan(rawURL); i >= 0 {
			add(rawURL[i:j])
		}
		return out
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			add(p)
			add(url.UserPassword("", p).String()[1:]) // percent-encoded form
		}
	}
	for _, p := range u.Query()["password"] {
		add(p)
		add(url.QueryEscape(p))
	}
	return out
}

// scrubbed returns err, or when its text contains a password of rawURL (as a
// client library may quote it), an error with the same chain whose text has
// the password replaced.
func scrubbed(err error, rawURL string) error {
	msg := err.Error()
	clean := msg
	for _, s := range secretsOf(rawURL) {
		clean = strings.ReplaceAll(clean, s, redactedMark)
	}
	if clean == msg {
		return err
	}
	return &scrubbedError{msg: clean, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }

// Unwrap returns the original error, for errors.Is and errors.As; its own
// text is not redacted.
func (e *scrubbedError) Unwrap() error { return e.err }
