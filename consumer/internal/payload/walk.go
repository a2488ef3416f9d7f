package payload

import (
	"encoding/json"
	"math/big"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// A Check is the check go generate writes for one node of a published
// schema: whether v, as encoding/json reads it into any (numbers as
// json.Number), is valid there, and v itself, or, when w.Fix, v rewritten
// as normalize does (an integer written 1.0 or 1e3 as an integer).
type Check func(w *Walk, v any) (any, bool)

// Walk is the state of a generated check over one document. A first walk
// checks and counts; when it finds what the decoder must not see (a key
// the schema does not declare, an integer not written as one), a second
// walk with Fix set drops and rewrites it in place.
type Walk struct {
	Fix   bool // drop undeclared keys, write integers as integers
	Dirty bool // a walk with Fix would change the document
	Keys  int  // keys of the document's objects, at every depth
}

// Any accepts every value (a schema without keywords).
func (w *Walk) Any(v any) (any, bool) {
	if !w.Fix {
		w.Keys += keysIn(v)
	}
	return v, true
}

// Required reports whether obj holds every key of keys.
func (w *Walk) Required(obj map[string]any, keys []string) bool {
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			return false
		}
	}
	return true
}

// Object checks the values of obj, an object of declared fields: props
// checks the declared keys (a nil check: any value); the others are
// refused when closed, else checked by additional (nil: any value) and,
// props being declared, dropped from what the decoder reads.
func (w *Walk) Object(obj map[string]any, props map[string]Check, additional Check, closed bool) bool {
	if !w.Fix {
		w.Keys += len(obj)
	}
	for k, val := range obj {
		check, declared := props[k]
		if !declared {
			if closed {
				return false
			}
			if props != nil {
				if w.Fix {
					delete(obj, k)
					continue
				}
				w.Dirty = true
			}
			check = additional
		}
		if check == nil { // a schema without keywords
			w.Any(val)
			continue
		}
		nv, ok := check(w, val)
		if !ok {
			return false
		}
		if w.Fix {
			obj[k] = nv
		}
	}
	return true
}

// Array checks every element of arr with items (nil: any value).
func (w *Walk) Array(arr []any, items Check) bool {
	for i, val := range arr {
		if items == nil {
			w.Any(val)
			continue
		}
		nv, ok := items(w, val)
		if !ok {
			return false
		}
		if w.Fix {
			arr[i] = nv
		}
	}
	return true
}

// Integer reports whether x is an integer, as the schema reads numbers
// (1.0 and 1e3 are), and returns it written as one when w.Fix.
func (w *Walk) Integer(x json.Number) (json.Number, bool) {
	n, ok := parseNumber(x)
	if !ok || !n.isInt() {
		return x, false
	}
	if !strings.ContainsAny(string(x), ".eE") {
		return x, true
	}
	if !w.Fix {
		w.Dirty = true
		return x, true
	}
	return json.Number(n.big().Num().String()), true
}

// InBounds reports whether x lies within the bounds (nil: none), compared
// as exact rationals.
func (w *Walk) InBounds(x json.Number, minimum, maximum, exclusiveMinimum, exclusiveMaximum *Bound) bool {
	n, ok := parseNumber(x)
	if !ok {
		return false
	}
	return (minimum == nil || n.cmp(&minimum.b) >= 0) && (maximum == nil || n.cmp(&maximum.b) <= 0) &&
		(exclusiveMinimum == nil || n.cmp(&exclusiveMinimum.b) > 0) &&
		(exclusiveMaximum == nil || n.cmp(&exclusiveMaximum.b) < 0)
}

// Length reports whether s has from minimum to maximum characters (code
// points, as JSON Schema counts them); -1 for no bound.
func (w *Walk) Length(s string, minimum, maximum int) bool {
	if len(s) >= minimum && (maximum < 0 || len(s) <= maximum) {
		return true // the bytes bound the characters
	}
	c := utf8.RuneCountInString(s)
	return c >= minimum && (maximum < 0 || c <= maximum)
}

// DateTime reports whether s, which matches the time pattern the
// published schemas give format date-time, is a date-time: its date
// exists (the pattern holds the rest).
func (w *Walk) DateTime(s string) bool {
	if len(s) < 20 {
		return false
	}
	_, err := time.Parse("2006-01-02", s[:10])
	return err == nil
}

// UUID reports whether s is a UUID as format uuid says: 8-4-4-4-12 hex
// digits.
func (w *Walk) UUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// A Bound is a minimum or a maximum of a generated check.
type Bound struct{ b bound }

// NewBound returns the bound written s in the published schema; it panics
// on what is not a JSON number (go generate writes s).
func NewBound(s string) *Bound {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("payload: bound " + s + " is not a number")
	}
	return &Bound{b: *newBound(r)}
}

// NewPattern compiles the pattern of a published schema (go generate
// writes it, so it compiles).
func NewPattern(expr string) *regexp.Regexp { return regexp.MustCompile(expr) }
