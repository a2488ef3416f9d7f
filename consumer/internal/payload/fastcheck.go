package payload

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A fastNode is a compiled schema node, reduced to the keywords the
// published payload schemas use, that tells whether a document is valid
// without the library's bookkeeping (scopes, locations and errors for
// every value). It answers exactly as (*jsonschema.Schema).Validate does;
// only its "valid" skips Validate: a document it finds invalid is
// validated again by the library, whose errors make the refusal.
type fastNode struct {
	always bool // no keyword: every value is valid
	never  bool // the false schema

	types  uint8 // of the json* bits; 0 for any
	enum   []any // strings, booleans and null only
	consts []any // the const, as a one-value enum
	not    *fastNode
	format func(any) error

	// object
	props        map[string]*fastNode
	hasProps     bool // props declared: normalize drops the other keys
	required     []string
	additional   *fastNode
	noAdditional bool

	// array
	items *fastNode

	// string
	minLength, maxLength int // -1 for none
	pattern              jsonschema.Regexp

	// number
	minimum, maximum, exclusiveMinimum, exclusiveMaximum *bound
}

const (
	jsonNull uint8 = 1 << iota
	jsonBoolean
	jsonNumber
	jsonInteger
	jsonString
	jsonArray
	jsonObject
)

var jsonTypeBits = map[string]uint8{"null": jsonNull, "boolean": jsonBoolean, "number": jsonNumber,
	"integer": jsonInteger, "string": jsonString, "array": jsonArray, "object": jsonObject}

// compileFast reduces sch to a fastNode, or returns nil if sch uses a
// keyword the fast check does not handle: the library then validates
// every payload alone.
func compileFast(sch *jsonschema.Schema) *fastNode {
	if sch == nil {
		return nil
	}
	if sch.Bool != nil {
		return &fastNode{always: *sch.Bool, never: !*sch.Bool}
	}
	if sch.DraftVersion < 2020 || unhandled(sch) {
		return nil
	}
	n := &fastNode{minLength: -1, maxLength: -1, required: sch.Required, pattern: sch.Pattern}
	if sch.Types != nil {
		for _, t := range sch.Types.ToStrings() {
			n.types |= jsonTypeBits[t]
		}
	}
	if sch.Enum != nil {
		if !scalars(sch.Enum.Values) {
			return nil
		}
		n.enum = sch.Enum.Values
	}
	if sch.Const != nil {
		if !scalars([]any{*sch.Const}) {
			return nil
		}
		n.consts = []any{*sch.Const}
	}
	if sch.Not != nil {
		if n.not = compileFast(sch.Not); n.not == nil {
			return nil
		}
	}
	if sch.Format != nil {
		n.format = sch.Format.Validate
	}
	if sch.Properties != nil {
		n.hasProps = true
		n.props = make(map[string]*fastNode, len(sch.Properties))
		for k, sub := range sch.Properties {
			if n.props[k] = compileFast(sub); n.props[k] == nil {
				return nil
			}
		}
	}
	switch a := sch.AdditionalProperties.(type) {
	case nil:
	case bool:
		n.noAdditional = !a
	case *jsonschema.Schema:
		if n.additional = compileFast(a); n.additional == nil {
			return nil
		}
	default:
		return nil
	}
	if sch.Items2020 != nil {
		if n.items = compileFast(sch.Items2020); n.items == nil {
			return nil
		}
	}
	if sch.MinLength != nil {
		n.minLength = *sch.MinLength
	}
	if sch.MaxLength != nil {
		n.maxLength = *sch.MaxLength
	}
	n.minimum, n.maximum = newBound(sch.Minimum), newBound(sch.Maximum)
	n.exclusiveMinimum, n.exclusiveMaximum = newBound(sch.ExclusiveMinimum), newBound(sch.ExclusiveMaximum)
	n.always = n.types == 0 && n.enum == nil && n.consts == nil && n.not == nil && n.format == nil &&
		!n.hasProps && len(n.required) == 0 && n.additional == nil && !n.noAdditional && n.items == nil &&
		n.minLength < 0 && n.maxLength < 0 && n.pattern == nil &&
		n.minimum == nil && n.maximum == nil && n.exclusiveMinimum == nil && n.exclusiveMaximum == nil
	return n
}

// unhandled reports whether sch holds a keyword the fast check does not
// handle. fastcheck_test.go lists every field of jsonschema.Schema, so that
// a field a later version of the library adds is looked at here.
func unhandled(sch *jsonschema.Schema) bool {
	return sch.Ref != nil || sch.RecursiveRef != nil || sch.DynamicRef != nil ||
		len(sch.AllOf) > 0 || len(sch.AnyOf) > 0 || len(sch.OneOf) > 0 ||
		sch.If != nil || sch.Then != nil || sch.Else != nil ||
		sch.MaxProperties != nil || sch.MinProperties != nil || sch.PropertyNames != nil ||
		len(sch.PatternProperties) > 0 || len(sch.Dependencies) > 0 ||
		len(sch.DependentRequired) > 0 || len(sch.DependentSchemas) > 0 || sch.UnevaluatedProperties != nil ||
		sch.MinItems != nil || sch.MaxItems != nil || sch.UniqueItems || sch.Contains != nil ||
		sch.MinContains != nil || sch.MaxContains != nil || sch.Items != nil || sch.AdditionalItems != nil ||
		len(sch.PrefixItems) > 0 || sch.UnevaluatedItems != nil ||
		sch.ContentEncoding != nil || sch.ContentMediaType != nil || sch.ContentSchema != nil ||
		sch.MultipleOf != nil || len(sch.Extensions) > 0 ||
		(sch.Format != nil && sch.Format.Name == "regex")
}

// scalars reports whether vs holds only strings, booleans and nulls, which
// the library compares as Go compares them.
func scalars(vs []any) bool {
	for _, v := range vs {
		switch v.(type) {
		case nil, bool, string:
		default:
			return false
		}
	}
	return true
}

// A bound is a minimum or maximum, with what compares it to an int64
// without big.Rat.
type bound struct {
	rat   *big.Rat
	floor int64 // floor(rat) unless sat is set
	frac  bool  // rat is not an integer
	sat   int   // 1: rat is above every int64; -1: below every int64
}

var (
	minInt64 = new(big.Rat).SetInt64(-1 << 63)
	maxInt64 = new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 63)) // 2^63, above every int64
)

func newBound(r *big.Rat) *bound {
	if r == nil {
		return nil
	}
	b := &bound{rat: r}
	switch {
	case r.Cmp(maxInt64) >= 0:
		b.sat = 1
	case r.Cmp(minInt64) < 0:
		b.sat = -1
	default:
		q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int)) // Euclidean: the floor, the denominator being positive
		b.floor, b.frac = q.Int64(), m.Sign() != 0
	}
	return b
}

// fastWalk checks a document against a fastNode. When counting, it also
// counts the keys of the document's objects at every depth (keysIn) and
// notes whether normalize could change anything.
type fastWalk struct {
	counting  bool
	keys      int
	normalize bool
}

func (w *fastWalk) valid(n *fastNode, v any) bool {
	if n.always {
		if w.counting {
			w.keys += keysIn(v)
		}
		return true
	}
	if n.never {
		return false
	}
	var t uint8
	var num number
	parsed := false
	switch v.(type) {
	case nil:
		t = jsonNull
	case bool:
		t = jsonBoolean
	case json.Number:
		t = jsonNumber
	case string:
		t = jsonString
	case []any:
		t = jsonArray
	case map[string]any:
		t = jsonObject
	default: // the library's to judge
		return false
	}
	if n.types != 0 && n.types&t == 0 {
		if t != jsonNumber || n.types&jsonInteger == 0 {
			return false
		}
		if num, parsed = parseNumber(v.(json.Number)); !parsed || !num.isInt() {
			return false
		}
	}
	if n.consts != nil && !inScalars(n.consts, v) || n.enum != nil && !inScalars(n.enum, v) {
		return false
	}
	if n.format != nil && n.format(v) != nil {
		return false
	}
	switch v := v.(type) {
	case map[string]any:
		if !w.object(n, v) {
			return false
		}
	case []any:
		for _, item := range v {
			if n.items == nil {
				if w.counting {
					w.keys += keysIn(item)
				}
			} else if !w.valid(n.items, item) {
				return false
			}
		}
	case string:
		if !n.validString(v) {
			return false
		}
	case json.Number:
		if w.counting && n.types&jsonInteger != 0 && strings.ContainsAny(string(v), ".eE") {
			w.normalize = true
		}
		if !parsed && (n.minimum != nil || n.maximum != nil || n.exclusiveMinimum != nil || n.exclusiveMaximum != nil) {
			if num, parsed = parseNumber(v); !parsed {
				return false
			}
		}
		if n.minimum != nil && num.cmp(n.minimum) < 0 || n.maximum != nil && num.cmp(n.maximum) > 0 ||
			n.exclusiveMinimum != nil && num.cmp(n.exclusiveMinimum) <= 0 ||
			n.exclusiveMaximum != nil && num.cmp(n.exclusiveMaximum) >= 0 {
			return false
		}
	}
	if n.not != nil {
		var inner fastWalk // neither counts nor notes
		if inner.valid(n.not, v) {
			return false
		}
	}
	return true
}

func (w *fastWalk) object(n *fastNode, obj map[string]any) bool {
	for _, k := range n.required {
		if _, ok := obj[k]; !ok {
			return false
		}
	}
	if w.counting {
		w.keys += len(obj)
	}
	for k, val := range obj {
		sub, declared := n.props[k]
		if !declared {
			if n.noAdditional {
				return false
			}
			if n.hasProps && w.counting {
				w.normalize = true // normalize drops the key
			}
			sub = n.additional
		}
		if sub == nil {
			if w.counting {
				w.keys += keysIn(val)
			}
			continue
		}
		if !w.valid(sub, val) {
			return false
		}
	}
	return true
}

func (n *fastNode) validString(s string) bool {
	if n.minLength >= 0 || n.maxLength >= 0 {
		// Characters, as the library counts them; the bytes bound them.
		if len(s) < n.minLength || n.maxLength >= 0 && len(s) > n.maxLength {
			c := utf8.RuneCountInString(s)
			if c < n.minLength || n.maxLength >= 0 && c > n.maxLength {
				return false
			}
		}
	}
	return n.pattern == nil || n.pattern.MatchString(s)
}

func inScalars(vs []any, v any) bool {
	switch v.(type) {
	case nil, bool, string:
		for _, x := range vs {
			if x == v {
				return true
			}
		}
	}
	return false
}

// A number is a JSON number: when written without exponent and with at
// most 18 digits before its point, its floor and whether it has a fraction,
// which compare it with most bounds; else (or to compare fractions) as
// the library reads it, a big.Rat.
type number struct {
	s       json.Number
	simple  bool
	floor   int64
	frac    bool
	rat     *big.Rat
	invalid bool
}

func parseNumber(s json.Number) (number, bool) {
	x := number{s: s}
	str := string(s)
	if strings.ContainsAny(str, "eE") {
		return x, x.big() != nil
	}
	intPart, fracPart, _ := strings.Cut(str, ".")
	neg := strings.HasPrefix(intPart, "-")
	if len(strings.TrimPrefix(intPart, "-")) > 18 {
		return x, x.big() != nil
	}
	n, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil {
		return x, x.big() != nil
	}
	x.simple, x.floor = true, n
	x.frac = strings.Trim(fracPart, "0") != ""
	if neg && x.frac {
		x.floor-- // -12.5 lies between -13 and -12
	}
	return x, true
}

// big is the number as the library reads it.
func (x *number) big() *big.Rat {
	if x.rat == nil && !x.invalid {
		r, ok := new(big.Rat).SetString(string(x.s))
		if ok {
			x.rat = r
		} else {
			x.invalid = true
		}
	}
	return x.rat
}

func (x *number) isInt() bool {
	if x.simple {
		return !x.frac
	}
	return x.big().IsInt()
}

// cmp compares the number with b as big.Rat.Cmp does.
func (x *number) cmp(b *bound) int {
	if x.simple {
		switch {
		case b.sat != 0:
			return -b.sat
		case x.floor < b.floor:
			return -1
		case x.floor > b.floor:
			return 1
		case !x.frac && !b.frac:
			return 0
		case !x.frac:
			return -1
		case !b.frac:
			return 1
		}
	}
	return x.big().Cmp(b.rat)
}
