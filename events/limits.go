package events

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on the headers and aggregate id of an event: what every supported
// broker carries unchanged. NATS headers are the narrowest (keys are MIME
// tokens; values lose line breaks and surrounding white space in transit),
// AMQP field names are short strings (255 bytes), and RabbitMQ refuses a
// message whose properties exceed one frame (128 KiB by default), so the
// headers leave room for the outbox's own metadata. Emit refuses what breaks
// them with a *ValidationError; the relay sets such a row (written by hand)
// aside at once.
const (
	// MaxHeaderKeyBytes bounds a header key.
	MaxHeaderKeyBytes = 255
	// MaxHeadersBytes bounds a header value, and all headers together
	// (keys and values).
	MaxHeadersBytes = 64 << 10
	// MaxAggregateIDBytes bounds an aggregate id.
	MaxAggregateIDBytes = 255
)

// keySymbols are the characters besides ASCII letters and digits a header
// key may hold: an HTTP/MIME token, which NATS requires.
const keySymbols = "!#$%&'*+-.^_`|~"

// CheckHeaders reports the first header (in key order) that breaks the
// limits, or all headers together being too large.
func CheckHeaders(h map[string]string) error {
	keys := make([]string, 0, len(h))
	total := 0
	for k, v := range h {
		keys = append(keys, k)
		total += len(k) + len(v)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := CheckHeader(k, h[k]); err != nil {
			return err
		}
	}
	if total > MaxHeadersBytes {
		return fmt.Errorf("events: headers hold %d bytes in all (keys and values), more than %d", total, MaxHeadersBytes)
	}
	return nil
}

// CheckHeader reports what in one header breaks the limits: a key of 1 to
// 255 bytes of letters, digits and !#$%&'*+-.^_`|~, not reserved (the
// "outbox_" and "Nats-" prefixes and Watermill's "_watermill_message_uuid",
// in any case); a value of valid UTF-8, at most 64 KiB, without control
// characters other than tab, nor a space or tab at either end.
func CheckHeader(key, value string) error {
	if err := checkHeaderKey(key); err != nil {
		return fmt.Errorf("events: header %s: key %w", shown(key), err)
	}
	if err := checkHeaderValue(value); err != nil {
		return fmt.Errorf("events: header %s: value %w", shown(key), err)
	}
	return nil
}

func checkHeaderKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("is empty")
	case len(k) > MaxHeaderKeyBytes:
		return fmt.Errorf("is %d bytes, more than %d", len(k), MaxHeaderKeyBytes)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte(keySymbols, c) >= 0:
		case c == ' ':
			return fmt.Errorf("has a space")
		case c < ' ' || c == 0x7f:
			return fmt.Errorf("has %s", control(rune(c)))
		case c >= utf8.RuneSelf:
			return fmt.Errorf("has a non-ASCII character (a key is ASCII letters, digits and %s)", keySymbols)
		default:
			return fmt.Errorf("has %q (a key is ASCII letters, digits and %s)", c, keySymbols)
		}
	}
	lower := strings.ToLower(k)
	switch {
	case strings.HasPrefix(lower, ReservedPrefix):
		return fmt.Errorf("uses the reserved prefix %q", ReservedPrefix)
	case strings.HasPrefix(lower, "nats-"):
		return fmt.Errorf(`is reserved: the prefix "Nats-" belongs to NATS`)
	case lower == "_watermill_message_uuid":
		return fmt.Errorf("is reserved: Watermill carries the message UUID in it")
	}
	return nil
}

func checkHeaderValue(v string) error {
	if len(v) > MaxHeadersBytes {
		return fmt.Errorf("is %d bytes, more than %d", len(v), MaxHeadersBytes)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("is not valid UTF-8")
	}
	for _, r := range v {
		switch {
		case r == 0:
			return fmt.Errorf("holds a NUL character, which PostgreSQL's jsonb cannot store")
		case r == '\t':
		case unicode.IsControl(r):
			return fmt.Errorf("has %s", control(r))
		}
	}
	if strings.Trim(v, " \t") != v {
		return fmt.Errorf("starts or ends with a space or tab (NATS would trim it)")
	}
	return nil
}

// CheckAggregateID reports what in an aggregate id breaks the limits: 1 to
// 255 bytes of valid UTF-8, without control characters, nor white space at
// either end.
func CheckAggregateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("events: aggregate id is empty")
	case len(id) > MaxAggregateIDBytes:
		return fmt.Errorf("events: aggregate id %s is %d bytes, more than %d", shown(id), len(id), MaxAggregateIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("events: aggregate id %s is not valid UTF-8", shown(id))
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("events: aggregate id %s has %s", shown(id), control(r))
		}
	}
	first, _ := utf8.DecodeRuneInString(id)
	last, _ := utf8.DecodeLastRuneInString(id)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return fmt.Errorf("events: aggregate id %s starts or ends with white space", shown(id))
	}
	return nil
}

// control names a control character.
func control(r rune) string {
	switch r {
	case 0:
		return "a NUL character"
	case '\n':
		return "a line break (LF)"
	case '\r':
		return "a line break (CR)"
	case '\t':
		return "a tab"
	}
	return fmt.Sprintf("control character %U", r)
}

// shown quotes s for an error, cut short so that a huge key or id does not
// flood the message.
func shown(s string) string {
	const most = 64
	if len(s) <= most {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:most]) + "..."
}
