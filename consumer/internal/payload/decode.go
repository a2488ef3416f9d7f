package payload

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A Reader is what go generate writes to read a checked document into
// the struct of an event's latest version: doc is the payload as the
// schema read it, raw the JSON encoding/json would read (for
// json.RawMessage fields). It returns false for anything it does not read
// exactly as encoding/json would (a key that matches a field only by its
// case, a value it was not written for); encoding/json then reads the
// payload. It may have changed e when it returns false.
type Reader[T any] func(doc map[string]any, raw []byte, e *T) bool

// DecodeWith is s.Decode, reading the checked document into e with read
// (written by go generate for T) rather than decoding the payload a second
// time. It does so only for payloads parseFast read: their strings hold no
// escapes, so a string of the document is the text encoding/json hands a
// time.Time. Anything else, and whatever read declines, encoding/json
// decodes, into e as it was.
func DecodeWith[T any](s *Schema, payload []byte, e *T, read Reader[T]) error {
	doc, clean, plain, err := s.check(payload)
	if err != nil {
		return err
	}
	obj, ok := doc.(map[string]any)
	if !plain || !ok {
		return s.decodeLibrary(clean, e)
	}
	got := *e
	if !read(obj, clean, &got) {
		if Read != nil {
			Read(s.path, false)
		}
		return s.decodeLibrary(clean, e)
	}
	if Read != nil {
		Read(s.path, true)
	}
	if CrossCheck != nil { // tests: the library decodes too, and must agree
		if err := s.decodeLibrary(clean, e); err != nil || !reflect.DeepEqual(got, *e) {
			CrossCheck(fmt.Sprintf("%s: the generated decode reads %#v, encoding/json %#v (%v): %s", s.path, got, *e, err, payload))
		}
	}
	*e = got
	return nil
}

// Read, for tests, hears whether the generated reader read a payload
// given to the schema at path (or declined it).
var Read func(path string, generated bool)

// The readers of one value: each reads v, a value of a checked document,
// into dst as encoding/json reads its JSON, or returns false (the
// generated reader then declines the payload). They compose: Ptr, List
// and Map take the reader of what they hold.

// String reads a string.
func String(v any, dst *string) bool {
	s, ok := v.(string)
	*dst = s
	return ok
}

// Bool reads a bool.
func Bool(v any, dst *bool) bool {
	b, ok := v.(bool)
	*dst = b
	return ok
}

// Int reads a number the schema accepted as an integer into an integer
// type; false where encoding/json would refuse it (out of T's range).
func Int[T ~int | ~int32 | ~int64](v any, dst *T) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || int64(T(i)) != i {
		return false
	}
	*dst = T(i)
	return true
}

// Float reads a number; false where encoding/json would refuse it (out
// of range).
func Float(v any, dst *float64) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	*dst = f
	return err == nil
}

// Time reads a string as time.Time reads JSON (RFC 3339, strictly):
// DecodeWith hands it only strings written without escapes, which
// time.Time.UnmarshalJSON reads as UnmarshalText does.
func Time(v any, dst *time.Time) bool {
	s, ok := v.(string)
	return ok && dst.UnmarshalText([]byte(s)) == nil
}

// Text reads a string into a type that implements
// encoding.TextUnmarshaler (a UUID), as encoding/json does.
func Text[T any, PT interface {
	*T
	encoding.TextUnmarshaler
}](v any, dst PT) bool {
	s, ok := v.(string)
	return ok && dst.UnmarshalText([]byte(s)) == nil
}

// Bytes reads a string as encoding/json reads a []byte: standard base64,
// new lines ignored; "" is an empty, non-nil slice, null nil.
func Bytes(v any, dst *[]byte) bool {
	if v == nil {
		*dst = nil
		return true
	}
	s, ok := v.(string)
	if !ok {
		return false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, []byte(s))
	*dst = b[:n]
	return err == nil
}

// Ptr reads a value that may be null into a pointer: nil for null, else
// a new T that read reads.
func Ptr[T any](v any, dst **T, read func(any, *T) bool) bool {
	if v == nil {
		*dst = nil
		return true
	}
	p := new(T)
	if !read(v, p) {
		return false
	}
	*dst = p
	return true
}

// List reads an array into a new slice, each element read by read into a
// zero value (as encoding/json reads into a nil slice): nil for null,
// empty and non-nil for [].
func List[T any](v any, dst *[]T, read func(any, *T) bool) bool {
	if v == nil {
		*dst = nil
		return true
	}
	a, ok := v.([]any)
	if !ok {
		return false
	}
	out := make([]T, len(a))
	for i, x := range a {
		if !read(x, &out[i]) {
			return false
		}
	}
	*dst = out
	return true
}

// Map reads an object into a new map, each value read by read into a zero
// value: nil for null.
func Map[T any](v any, dst *map[string]T, read func(any, *T) bool) bool {
	if v == nil {
		*dst = nil
		return true
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	out := make(map[string]T, len(m))
	for k, x := range m {
		var e T
		if !read(x, &e) {
			return false
		}
		out[k] = e
	}
	*dst = out
	return true
}

// KeyFolds reports whether key, which names no field exactly, could name
// one of fields for encoding/json, which matches names regardless of case.
// It errs on the side of yes (it also ignores - and _), which only sends
// the payload to encoding/json.
func KeyFolds(key string, fields ...string) bool {
	k := foldable(key)
	for _, f := range fields {
		if strings.EqualFold(k, foldable(f)) {
			return true
		}
	}
	return false
}

func foldable(s string) string {
	if !strings.ContainsAny(s, "-_") {
		return s
	}
	return strings.NewReplacer("-", "", "_", "").Replace(s)
}

// Raw is the JSON of the value of key in raw, a JSON object, as
// encoding/json hands it to a json.RawMessage field: a copy of its bytes,
// without the blanks around it. It is false when the key is not there as
// written. raw is what DecodeWith decodes: a payload whose keys are each
// given once, or the document written again with each key once, so the
// first key found is the one.
func Raw(raw []byte, key string) (json.RawMessage, bool) {
	sc := scanner{b: raw}
	if !sc.skipSpace() || sc.b[sc.i] != '{' {
		return nil, false
	}
	sc.i++
	for {
		if !sc.skipSpace() {
			return nil, false
		}
		if sc.b[sc.i] == '}' {
			break
		}
		if sc.b[sc.i] == ',' {
			sc.i++
			continue
		}
		start := sc.i
		if !sc.skipValue() { // the key
			return nil, false
		}
		name := sc.b[start:sc.i]
		if !sc.skipSpace() || sc.b[sc.i] != ':' {
			return nil, false
		}
		sc.i++
		if !sc.skipSpace() {
			return nil, false
		}
		start = sc.i
		if !sc.skipValue() {
			return nil, false
		}
		if len(name) == len(key)+2 && string(name[1:len(name)-1]) == key {
			return append(json.RawMessage(nil), sc.b[start:sc.i]...), true
		}
	}
	return nil, false
}

// scanner skips over values of JSON already known to be valid.
type scanner struct {
	b []byte
	i int
}

func (sc *scanner) skipSpace() bool {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return true
		}
	}
	return false
}

// skipString moves past the string at sc.i.
func (sc *scanner) skipString() bool {
	for i := sc.i + 1; ; {
		n := bytes.IndexByte(sc.b[i:], '"')
		if n < 0 {
			return false
		}
		i += n
		escapes := 0 // an odd number of backslashes before it escapes the quote
		for j := i - 1; j > sc.i && sc.b[j] == '\\'; j-- {
			escapes++
		}
		i++
		if escapes%2 == 0 {
			sc.i = i
			return true
		}
	}
}

// skipValue moves past the value at sc.i: a string, or anything up to the
// end of the brackets it opens, or a literal up to its delimiter.
func (sc *scanner) skipValue() bool {
	depth := 0
	for sc.i < len(sc.b) {
		switch c := sc.b[sc.i]; c {
		case '"':
			if !sc.skipString() {
				return false
			}
		case '{', '[':
			depth++
			sc.i++
		case '}', ']':
			if depth == 0 {
				return true
			}
			depth--
			sc.i++
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return true
			}
			sc.i++
		default:
			sc.i++
		}
		if depth == 0 && sc.i > 0 && (sc.b[sc.i-1] == '"' || sc.b[sc.i-1] == '}' || sc.b[sc.i-1] == ']') {
			return true
		}
	}
	return depth == 0
}
