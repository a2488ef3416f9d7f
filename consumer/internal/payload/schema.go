// Package payload reads the payloads of generated handlers as the JSON
// Schema go generate publishes for each event version says, and words
// every refusal by the field's path. The consumer package exposes its
// Schema as consumer.PayloadSchema, for generated code.
package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/entoutbox/entoutbox/events"
)

// Schema holds the payloads of one event version
// to the JSON Schema go generate publishes for that version (the generated
// handlers embed the file), so that a handler accepts exactly what a team
// validating with the schema accepts, and reads it as they do:
// encoding/json alone would read a missing number as 0, null as the zero
// value and "S" into field "s", and would refuse 1.0 for an integer. Keys
// the schema does not declare are ignored at every depth (later compatible
// versions add them). A schema go generate wrote has its check written as
// Go (NewGenerated); the library, given the file, words what that check
// refuses, and alone checks a schema read from a file. The library's
// schema is compiled at its first use.
type Schema struct {
	event   string
	version int
	path    string
	gen     Check // nil: the library checks
	schema  func() (*jsonschema.Schema, error)
}

// NewSchema returns the schema of version of
// event, the file at path in fsys.
func NewSchema(fsys fs.FS, path, event string, version int) *Schema {
	s := &Schema{event: event, version: version, path: path}
	s.schema = sync.OnceValues(func() (*jsonschema.Schema, error) {
		sch, err := compileSchema(fsys, path)
		if err != nil {
			return nil, fmt.Errorf("consumer: the JSON Schema of %q version %d (%s): %w", event, version, path, err)
		}
		return sch, nil
	})
	return s
}

// NewGenerated returns the schema of version of event, the file at path
// in fsys, whose check go generate wrote from that file: check decides
// what is valid, and the file only words its refusals.
func NewGenerated(fsys fs.FS, path, event string, version int, check Check) *Schema {
	s := NewSchema(fsys, path, event, version)
	s.gen = check
	return s
}

func compileSchema(fsys fs.FS, path string) (*jsonschema.Schema, error) {
	b, err := fs.ReadFile(fsys, path)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(noLoader{}) // the dialect's meta-schema is built in; nothing else is loaded
	url := "file:///" + strings.TrimPrefix(path, "/")
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, os.ErrNotExist }

// Decode checks payload against the schema and decodes it into v, the
// struct of the version or of a later one (whose defaults, set in v
// before, then fill in what the version lacks). A refusal is an
// *events.ValidationError naming each field the schema refuses by its path
// (lines[0].sku, attributes["gift"].value).
func (s *Schema) Decode(payload []byte, v any) error {
	_, clean, _, err := s.check(payload)
	if err != nil {
		return err
	}
	return s.decodeLibrary(clean, v)
}

// decodeLibrary decodes clean, JSON the schema accepted, into v.
func (s *Schema) decodeLibrary(clean []byte, v any) error {
	// json/v1 keeps encoding/json's meaning (it is what encoding/json
	// becomes with GOEXPERIMENT=jsonv2) at a third of its cost here.
	if err := jsonv1.Unmarshal(clean, v); err != nil {
		return fmt.Errorf("decoding %q version %d payload: %w", s.event, s.version, err)
	}
	return nil
}

// Fields checks payload against the schema and returns its fields for an
// upcaster, as DecodeFields does: numbers are json.Number, and keys the
// schema does not declare are left out.
func (s *Schema) Fields(payload []byte) (map[string]any, error) {
	doc, _, _, err := s.check(payload)
	if err != nil {
		return nil, err
	}
	fields, ok := doc.(map[string]any)
	if !ok { // the schema of a payload takes objects only
		return nil, s.invalid([]failure{{reason: "is not a JSON object"}})
	}
	return fields, nil
}

// check validates payload and returns it as a document and as JSON that
// encoding/json reads as the schema does: payload itself, or, when it has
// keys the schema does not declare, a key given twice or integers written
// as 1.0 or 1e3, the document re-encoded (without the undeclared keys, each
// key once, integers as integers). Plain payloads are read by parseFast,
// the rest by encoding/json; plain tells which (escapes in a string, for
// one, send a payload to encoding/json).
func (s *Schema) check(payload []byte) (doc any, clean []byte, plain bool, err error) {
	doc, written, plain := parseFast(payload)
	if CrossCheck != nil && plain {
		if lib, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload)); err != nil || !reflect.DeepEqual(lib, doc) || keysWritten(payload) != written {
			CrossCheck(fmt.Sprintf("%s: parseFast reads %#v (%d keys), encoding/json %#v (%d keys, %v): %s",
				s.path, doc, written, lib, keysWritten(payload), err, payload))
		}
	}
	if !plain {
		doc, err = jsonschema.UnmarshalJSON(bytes.NewReader(payload))
		if err != nil {
			return nil, nil, false, s.invalid([]failure{{reason: "is not JSON: " + err.Error()}})
		}
		written = keysWritten(payload)
	}
	var changed, twice bool
	if s.gen != nil {
		doc, changed, twice, err = s.checkGenerated(doc, written, payload)
	} else {
		doc, changed, twice, err = s.checkLibrary(doc, written)
	}
	if err != nil {
		return nil, nil, false, err
	}
	if !changed && !twice {
		return doc, payload, plain, nil
	}
	clean, err = encodeDocument(doc)
	return doc, clean, plain, err
}

// checkGenerated checks doc with the generated check, and normalizes it
// when it must. A key given twice counts once, with its last value, in
// the schema's reading (and JSON.parse's); encoding/json would merge two
// objects given for one key, reading keys the schema never saw.
func (s *Schema) checkGenerated(doc any, written int, payload []byte) (any, bool, bool, error) {
	var w Walk
	_, valid := s.gen(&w, doc)
	if Observe != nil {
		Observe(s.path, payload, valid)
	}
	if CrossCheck != nil {
		s.crossCheck(doc, valid, payload)
	}
	if !valid {
		return nil, false, false, s.refusal(doc)
	}
	if w.Dirty {
		fix := Walk{Fix: true}
		doc, _ = s.gen(&fix, doc)
	}
	return doc, w.Dirty, written != w.Keys, nil
}

// crossCheck, for tests, holds the generated check to the library.
func (s *Schema) crossCheck(doc any, valid bool, payload []byte) {
	sch, err := s.schema()
	if err != nil {
		CrossCheck(err.Error())
		return
	}
	if lib := sch.Validate(doc) == nil; lib != valid {
		CrossCheck(fmt.Sprintf("%s: the generated check says valid %v, the library %v: %s", s.path, valid, lib, payload))
	}
	if w := (Walk{}); valid {
		s.gen(&w, doc)
		if w.Keys != keysIn(doc) {
			CrossCheck(fmt.Sprintf("%s: the generated check counts %d keys, keysIn %d: %s", s.path, w.Keys, keysIn(doc), payload))
		}
	}
}

// refusal words why the schema refuses doc, which the generated check
// refused: the library validates it again and names every field.
func (s *Schema) refusal(doc any) error {
	sch, err := s.schema()
	if err != nil {
		return err
	}
	err = sch.Validate(doc)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return s.invalid(failures(ve, sch, doc))
	}
	if err == nil { // the tests hold the two equal; still, the check decides
		err = errors.New("the generated check refuses what the library accepts")
	}
	return fmt.Errorf("validating %q version %d payload: %w", s.event, s.version, err)
}

// checkLibrary validates doc with the library and normalizes it.
func (s *Schema) checkLibrary(doc any, written int) (any, bool, bool, error) {
	sch, err := s.schema()
	if err != nil {
		return nil, false, false, err
	}
	if err := sch.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, false, false, fmt.Errorf("validating %q version %d payload: %w", s.event, s.version, err)
		}
		return nil, false, false, s.invalid(failures(ve, sch, doc))
	}
	twice := written != keysIn(doc)
	doc, changed := normalize(doc, sch)
	return doc, changed, twice, nil
}

// CrossCheck, set by tests (the consumer package sets it in all of its
// own), makes check hold parseFast to encoding/json and the generated
// check to the library's Validate and keysIn, and is called with what
// they disagree on.
var CrossCheck func(disagreement string)

// Observe, set by tests, is told the generated check's verdict on each
// payload (the path of its schema file, the payload as received).
var Observe func(path string, payload []byte, valid bool)

// keysWritten counts the keys of the objects in payload, valid JSON, at
// every depth: the colons outside its strings.
func keysWritten(payload []byte) int {
	n := 0
	for i := 0; i < len(payload); i++ {
		switch payload[i] {
		case ':':
			n++
		case '"': // to the quote that ends the string: one after an even run of backslashes
			j := i + 1
			for {
				k := bytes.IndexByte(payload[j:], '"')
				if k < 0 {
					return n
				}
				j += k
				escapes := 0
				for p := j - 1; p > i && payload[p] == '\\'; p-- {
					escapes++
				}
				if escapes%2 == 0 {
					break
				}
				j++
			}
			i = j
		}
	}
	return n
}

// keysIn counts the keys of the objects in doc at every depth.
func keysIn(doc any) int {
	n := 0
	switch v := doc.(type) {
	case map[string]any:
		n += len(v)
		for _, val := range v {
			n += keysIn(val)
		}
	case []any:
		for _, val := range v {
			n += keysIn(val)
		}
	}
	return n
}

func encodeDocument(doc any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("consumer: encoding a checked payload: %w", err)
	}
	return buf.Bytes(), nil
}

// normalize drops from doc the keys of objects that sch does not declare
// and writes the integers it holds as integers, and reports whether it
// changed anything. doc has been validated against sch.
func normalize(doc any, sch *jsonschema.Schema) (any, bool) {
	switch v := doc.(type) {
	case map[string]any:
		changed := false
		switch {
		case sch.Properties != nil: // an object of declared fields
			for k, val := range v {
				sub, ok := sch.Properties[k]
				if !ok {
					delete(v, k)
					changed = true
					continue
				}
				if nv, c := normalize(val, sub); c {
					v[k], changed = nv, true
				}
			}
		case schemaOf(sch.AdditionalProperties) != nil: // a map
			sub := schemaOf(sch.AdditionalProperties)
			for k, val := range v {
				if nv, c := normalize(val, sub); c {
					v[k], changed = nv, true
				}
			}
		}
		return v, changed
	case []any:
		changed := false
		if sch.Items2020 != nil {
			for i, val := range v {
				if nv, c := normalize(val, sch.Items2020); c {
					v[i], changed = nv, true
				}
			}
		}
		return v, changed
	case json.Number:
		// 1.0 and 1e3 are integers to the schema, not to encoding/json.
		if !strings.ContainsAny(string(v), ".eE") || sch.Types == nil || !slices.Contains(sch.Types.ToStrings(), "integer") {
			return v, false
		}
		r, ok := new(big.Rat).SetString(string(v))
		if !ok || !r.IsInt() {
			return v, false
		}
		return json.Number(r.Num().String()), true
	}
	return doc, false
}

func schemaOf(v any) *jsonschema.Schema {
	s, _ := v.(*jsonschema.Schema)
	return s
}

// failure is one refusal of the schema: the field's path and why.
type failure struct{ path, reason string }

// Refusals listed in a dead letter's reason, and the length of each.
const (
	maxFailures      = 5
	maxFailureReason = 200
)

// invalid is the error of a payload the schema refuses.
func (s *Schema) invalid(fs []failure) error {
	slices.SortStableFunc(fs, func(a, b failure) int { return strings.Compare(a.path, b.path) })
	fs = slices.CompactFunc(fs, func(a, b failure) bool { return a == b })
	first := fs[0]
	var more []string
	for i, f := range fs[1:] {
		if i == maxFailures-1 {
			more = append(more, fmt.Sprintf("%d more", len(fs)-maxFailures))
			break
		}
		if f.path == "" {
			more = append(more, "the payload "+f.reason)
		} else {
			more = append(more, fmt.Sprintf("field %q %s", f.path, f.reason))
		}
	}
	reason := first.reason
	if first.path == "" {
		reason = "the payload " + reason
	}
	if len(more) > 0 {
		reason += "; " + strings.Join(more, "; ")
	}
	return &events.ValidationError{Event: s.event, Version: s.version, Field: first.path,
		Reason: reason + " (JSON Schema " + s.path + ")"}
}

var printer = message.NewPrinter(language.English)

// base64Pattern is the pattern the published schemas give bytes fields
// (package codegen writes it).
const base64Pattern = `^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`

// failures lists the leaves of a validation error with the path of their
// field, found by following sch and doc along its instance location, in
// the words of the generated Validate where it says the same.
func failures(ve *jsonschema.ValidationError, sch *jsonschema.Schema, doc any) []failure {
	var out []failure
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		path, at, value := fieldPath(e.InstanceLocation, sch, doc)
		if k, ok := e.ErrorKind.(*kind.Required); ok {
			for _, name := range k.Missing {
				p := name
				if path != "" {
					p = path + "." + name
				}
				out = append(out, failure{p, "is missing"})
			}
			return
		}
		out = append(out, failure{path, shorten(refusal(e.ErrorKind, at, value))})
	}
	walk(ve)
	if len(out) == 0 {
		out = append(out, failure{reason: shorten(ve.Error())})
	}
	return out
}

// refusal says why the schema at refuses value.
func refusal(k jsonschema.ErrorKind, at *jsonschema.Schema, value any) string {
	shown := func() string { b, _ := json.Marshal(value); return string(b) }
	switch k := k.(type) {
	case *kind.Type:
		if k.Got == "null" {
			return "is null, which the schema refuses (want " + strings.Join(k.Want, " or ") + ")"
		}
		return fmt.Sprintf("is %s %s, want %s", article(k.Got), k.Got, strings.Join(k.Want, " or "))
	case *kind.Not:
		// The schemas say "not" only of a required value's zero value.
		return "is required: " + shown() + " is the zero value"
	case *kind.Enum:
		return fmt.Sprintf("value %s is not one of %s", shown(), jsonList(k.Want))
	case *kind.MinLength:
		if k.Want == 1 {
			return `is "", which the schema refuses (it is required, or "" would stand for its default)`
		}
		return fmt.Sprintf("is %d characters long, less than the minimum %d", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("is %d characters long, more than the maximum %d", k.Got, k.Want)
	case *kind.Minimum:
		return fmt.Sprintf("value %s is below the minimum %s", shown(), ratString(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("value %s is above the maximum %s", shown(), ratString(k.Want))
	case *kind.ExclusiveMinimum:
		if k.Want.Sign() == 0 {
			return fmt.Sprintf("value %s is not positive", shown())
		}
		return fmt.Sprintf("value %s is not above %s", shown(), ratString(k.Want))
	case *kind.Format, *kind.Pattern:
		if at != nil && at.Format != nil {
			switch at.Format.Name {
			case "uuid":
				return shown() + " is not a UUID in its canonical form (8-4-4-4-12 hex digits)"
			case "date-time":
				return shown() + " is not an RFC 3339 time (upper-case T and Z, seconds up to 59)"
			}
		}
		// The compiler leaves contentEncoding unread (no content
		// assertion): the pattern of bytes says it.
		if k, ok := k.(*kind.Pattern); ok && k.Want == base64Pattern {
			return shown() + " is not padded standard base64"
		}
	}
	return k.LocalizedString(printer)
}

func article(typ string) string {
	if strings.ContainsRune("aeiou", rune(typ[0])) {
		return "an"
	}
	return "a"
}

func jsonList(vs []any) string {
	b, _ := json.Marshal(vs)
	return string(b)
}

func ratString(r *big.Rat) string {
	if r.IsInt() && len(r.Num().String()) <= 21 { // int64 bounds in full, float64's as 1.7976931348623157e+308
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// fieldPath renders an instance location as the generated Validate names
// fields: address.city, lines[0].sku, attributes["gift"].value; it also
// returns the schema and the value there.
func fieldPath(loc []string, sch *jsonschema.Schema, doc any) (string, *jsonschema.Schema, any) {
	var b strings.Builder
	for _, tok := range loc {
		switch v := doc.(type) {
		case []any:
			i, _ := strconv.Atoi(tok)
			fmt.Fprintf(&b, "[%d]", i)
			if i >= 0 && i < len(v) {
				doc = v[i]
			}
			if sch != nil {
				sch = sch.Items2020
			}
		case map[string]any:
			doc = v[tok]
			if sch != nil && sch.Properties != nil {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(tok)
				sch = sch.Properties[tok]
				continue
			}
			fmt.Fprintf(&b, "[%s]", strconv.Quote(tok))
			if sch != nil {
				sch = schemaOf(sch.AdditionalProperties)
			}
		default:
			return b.String(), nil, doc
		}
	}
	return b.String(), sch, doc
}

func shorten(s string) string {
	if len(s) <= maxFailureReason {
		return s
	}
	cut := maxFailureReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
