package schematest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Payload is a payload made from a schema: a sample, or the sample with
// one change.
type Payload struct {
	What string // the change, for messages
	// Path is the field the change is at, as the generated Validate names
	// fields (lines[0].sku, attrs["k1"].value); "" for the whole payload.
	Path string
	JSON []byte
	// BeyondJS: the change is a number a JavaScript number cannot hold
	// exactly (an int64 bound and one), so ajv reads another value.
	BeyondJS bool
}

// Object is a JSON object whose keys keep their order, so that a payload
// can give a key in another case after the declared one.
type Object struct {
	Keys []string
	Vals map[string]any
	// Before holds values given for a key before its own, the key then
	// written twice: every reader of the schema takes the last.
	Before map[string]any
}

func newObject() *Object { return &Object{Vals: map[string]any{}} }

// Set gives key k the value v, adding it last when it is new.
func (o *Object) Set(k string, v any) {
	if _, ok := o.Vals[k]; !ok {
		o.Keys = append(o.Keys, k)
	}
	o.Vals[k] = v
}

func (o *Object) setBefore(k string, v any) {
	if o.Before == nil {
		o.Before = map[string]any{}
	}
	o.Before[k] = v
}

// Delete removes key k.
func (o *Object) Delete(k string) {
	o.Keys = slices.DeleteFunc(o.Keys, func(x string) bool { return x == k })
	delete(o.Vals, k)
}

// MarshalJSON writes the keys in their order.
func (o *Object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.Keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		if first, ok := o.Before[k]; ok {
			fb, err := json.Marshal(first)
			if err != nil {
				return nil, err
			}
			b.Write(kb)
			b.WriteByte(':')
			b.Write(fb)
			b.WriteByte(',')
		}
		vb, err := json.Marshal(o.Vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// node is a schema document's object, as jsonschema.UnmarshalJSON reads
// it.
type node map[string]any

func (n node) types() []string {
	switch t := n["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

func (n node) is(typ string) bool { return slices.Contains(n.types(), typ) }

func (n node) props() map[string]any {
	p, _ := n["properties"].(map[string]any)
	return p
}

func (n node) sub(key string) node {
	s, _ := n[key].(map[string]any)
	return s
}

func (n node) str(key string) string {
	s, _ := n[key].(string)
	return s
}

func (n node) rat(key string) *big.Rat {
	v, ok := n[key].(json.Number)
	if !ok {
		return nil
	}
	r, ok := new(big.Rat).SetString(string(v))
	if !ok {
		return nil
	}
	return r
}

func (n node) enum() []any {
	e, _ := n["enum"].([]any)
	return e
}

// isMap: an object without declared fields, whose values are
// additionalProperties.
func (n node) isMap() bool {
	return n.is("object") && n.props() == nil && n.sub("additionalProperties") != nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Sample returns a value the schema accepts, every field of every object
// present.
func Sample(doc map[string]any) any { return sample(node(doc)) }

func sample(n node) any {
	switch {
	case n.props() != nil:
		o := newObject()
		for _, k := range sortedKeys(n.props()) {
			o.Set(k, sample(n.props()[k].(map[string]any)))
		}
		return o
	case n.isMap():
		o := newObject()
		o.Set("k1", sample(n.sub("additionalProperties")))
		return o
	case n.is("array"):
		return []any{sample(n.sub("items"))}
	case len(n.enum()) > 0:
		return n.enum()[0]
	case n.is("string"):
		switch {
		case n.str("format") == "date-time":
			return "2026-01-02T03:04:05Z"
		case n.str("format") == "uuid":
			return "6f1c2a8e-1d2b-4c3d-9e4f-5a6b7c8d9e0f"
		case n.str("contentEncoding") == "base64":
			return "AAEC"
		}
		s := "abc"
		if m := n.rat("maxLength"); m != nil && m.Num().Int64() < 3 {
			s = s[:m.Num().Int64()]
		}
		return s
	case n.is("integer"):
		return json.Number(pick(n, big.NewRat(1, 1)).RatString())
	case n.is("number"):
		return json.Number(decimal(pick(n, big.NewRat(3, 2))))
	case n.is("boolean"):
		return true
	}
	// Any JSON value.
	o := newObject()
	o.Set("any", []any{json.Number("1"), "x", nil})
	return o
}

// pick is want, moved into the schema's bounds.
func pick(n node, want *big.Rat) *big.Rat {
	v := new(big.Rat).Set(want)
	if m := n.rat("minimum"); m != nil && v.Cmp(m) < 0 {
		v.Set(m)
	}
	if m := n.rat("exclusiveMinimum"); m != nil && v.Cmp(m) <= 0 {
		v.Add(m, big.NewRat(1, 1))
	}
	if m := n.rat("maximum"); m != nil && v.Cmp(m) > 0 {
		v.Set(m)
	}
	return v
}

func decimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Variants returns the sample of the schema (first), then the sample with
// one change at a time: the whole payload replaced by what is no object;
// at every field of every object, at every depth, the key left out, set to
// null, given in another case (alone, and after the declared key), and the
// value replaced by values of each kind near and across what the schema
// allows (bounds and one, 1.0 for an integer, times, UUIDs and base64 in
// other forms, "", long strings of characters of two bytes, enum values in
// another case); keys no version declares at every object; an object, list
// or map given twice under its key, the first holding what the second
// leaves out; every list and map empty, longer, and their elements changed
// alike. Whether the schema
// takes each is for a validator to say.
func Variants(doc map[string]any) []Payload {
	base := sample(node(doc))
	seen := map[string]bool{}
	var out []Payload
	add := func(p Payload) {
		if !seen[string(p.JSON)] {
			seen[string(p.JSON)] = true
			out = append(out, p)
		}
	}
	baseJSON, _ := json.Marshal(base)
	add(Payload{What: "the sample", JSON: baseJSON})
	for _, raw := range []struct{ what, text string }{
		{"an array", "[]"}, {"a string", `"x"`}, {"null", "null"}, {"a number", "1"},
		{"not JSON", "{"}, {"nothing", ""}, {"two objects", "{} {}"},
	} {
		add(Payload{What: "the payload is " + raw.what, JSON: []byte(raw.text)})
	}
	// A key given twice, first with a value of another kind: every reader
	// of JSON here takes the last.
	if o, ok := base.(*Object); ok && len(o.Keys) > 0 {
		k := o.Keys[0]
		kb, _ := json.Marshal(k)
		add(Payload{What: fmt.Sprintf("key %s given twice, first as [[]]", kb), Path: k,
			JSON: append([]byte(`{`+string(kb)+`:[[]],`), baseJSON[1:]...)})
	}
	visit(node(doc), base, nil, "", func(what, path string, change func(root any) any, beyondJS bool) {
		tree := change(deepCopy(base))
		b, err := json.Marshal(tree)
		if err != nil {
			panic(fmt.Sprintf("schematest: %s: %v", what, err))
		}
		add(Payload{What: what, Path: path, JSON: b, BeyondJS: beyondJS})
	})
	return out
}

// loc is where a value is in a payload: object keys and list indexes.
type loc []any

// replace sets the value at l in root to v and returns root.
func (l loc) replace(root, v any) any {
	if len(l) == 0 {
		return v
	}
	parent := l[:len(l)-1].get(root)
	switch k := l[len(l)-1].(type) {
	case string:
		parent.(*Object).Set(k, v)
	case int:
		parent.([]any)[k] = v
	}
	return root
}

func (l loc) get(root any) any {
	v := root
	for _, step := range l {
		switch k := step.(type) {
		case string:
			v = v.(*Object).Vals[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v
}

type emit func(what, path string, change func(root any) any, beyondJS bool)

// visit makes the changes at l, whose schema is n and value in the sample
// is value, and at what it holds.
func visit(n node, value any, l loc, path string, emit emit) {
	name := path
	if name == "" {
		name = "the payload"
	}
	set := func(what string, v any, beyondJS bool) {
		emit(name+" = "+what, path, func(root any) any { return l.replace(root, v) }, beyondJS)
	}
	if len(l) > 0 {
		for _, c := range valueChanges(n) {
			set(c.what, c.value, c.beyondJS)
		}
	}
	at := func(sub string) string {
		if path == "" {
			return sub
		}
		return path + "." + sub
	}
	switch {
	case n.props() != nil:
		emit(name+" gets a key no version declares", path, func(root any) any {
			l.get(root).(*Object).Set("zz_unknown", "x")
			return root
		}, false)
		emit(name+" gets an object under a key no version declares", path, func(root any) any {
			deep := newObject()
			deep.Set("deep", []any{json.Number("1"), nil})
			l.get(root).(*Object).Set("zz_unknown", deep)
			return root
		}, false)
		for _, k := range sortedKeys(n.props()) {
			sub := node(n.props()[k].(map[string]any))
			p := at(k)
			upper := strings.ToUpper(k)
			emit(p+" left out", p, func(root any) any { l.get(root).(*Object).Delete(k); return root }, false)
			emit(p+" = null", p, func(root any) any { l.get(root).(*Object).Set(k, nil); return root }, false)
			if upper != k {
				emit(p+" given as "+upper, p, func(root any) any {
					o := l.get(root).(*Object)
					v := o.Vals[k]
					o.Delete(k)
					o.Set(upper, v)
					return root
				}, false)
				emit(p+" followed by "+upper+" holding another value", p, func(root any) any {
					o := l.get(root).(*Object)
					o.Set(upper, other(sub, o.Vals[k]))
					return root
				}, false)
			}
			if first, last, ok := givenTwice(sub, value.(*Object).Vals[k]); ok {
				emit(p+" given twice, first holding what the second leaves out", p, func(root any) any {
					o := l.get(root).(*Object)
					o.setBefore(k, first)
					o.Set(k, last)
					return root
				}, false)
			}
			visit(sub, value.(*Object).Vals[k], append(slices.Clip(l), k), p, emit)
		}
	case n.isMap():
		values := n.sub("additionalProperties")
		set("{}", newObject(), false)
		emit(name+` gets key "Ünï cödé"`, path, func(root any) any {
			l.get(root).(*Object).Set("Ünï cödé", sample(values))
			return root
		}, false)
		p := fmt.Sprintf("%s[%q]", path, "k1")
		emit(p+" = null", p, func(root any) any { l.get(root).(*Object).Set("k1", nil); return root }, false)
		visit(values, value.(*Object).Vals["k1"], append(slices.Clip(l), "k1"), p, emit)
	case n.is("array") && n.sub("items") != nil:
		items := n.sub("items")
		set("[]", []any{}, false)
		set("two elements", []any{sample(items), sample(items)}, false)
		p := path + "[0]"
		emit(p+" = null", p, func(root any) any { l.get(root).([]any)[0] = nil; return root }, false)
		visit(items, value.([]any)[0], append(slices.Clip(l), 0), p, emit)
	}
}

// givenTwice returns two values of schema n for one key given twice, the
// first holding what the last leaves out: the optional keys of an object
// (of every object of a list), another key of a map. A reader that merged
// them instead of taking the last would read what the last does not hold.
func givenTwice(n node, v any) (first, last any, ok bool) {
	thin := func(n node, v any) (any, bool) {
		o, isObject := v.(*Object)
		if n.props() == nil || !isObject {
			return nil, false
		}
		required, _ := n["required"].([]any)
		t, thinner := deepCopy(o).(*Object), false
		for _, k := range o.Keys {
			if !slices.Contains(required, any(k)) {
				t.Delete(k)
				thinner = true
			}
		}
		return t, thinner
	}
	switch {
	case n.props() != nil:
		if t, ok := thin(n, v); ok {
			return deepCopy(v), t, true
		}
	case n.isMap():
		o, isObject := v.(*Object)
		if !isObject {
			return nil, nil, false
		}
		f := newObject()
		f.Set("zz_first", sample(n.sub("additionalProperties")))
		return f, deepCopy(o), true
	case n.is("array") && n.sub("items") != nil:
		list, isList := v.([]any)
		if !isList {
			return nil, nil, false
		}
		thinned, changed := make([]any, len(list)), false
		for i, e := range list {
			t, ok := thin(n.sub("items"), e)
			if !ok {
				t = deepCopy(e)
			}
			thinned[i], changed = t, changed || ok
		}
		if changed {
			return deepCopy(v), thinned, true
		}
	}
	return nil, nil, false
}

type change struct {
	what     string
	value    any
	beyondJS bool
}

// valueChanges are the values that replace one of schema n.
func valueChanges(n node) []change {
	var c changes
	c.otherKinds(n)
	switch {
	case len(n.enum()) > 0:
		c.enumChanges(n)
	case n.str("format") == "date-time":
		c.add(dateTimeChanges...)
	case n.str("format") == "uuid":
		c.add(uuidChanges...)
	case n.str("contentEncoding") == "base64":
		c.add(base64Changes...)
	case n.is("string"):
		c.stringChanges(n)
	case n.is("integer"):
		c.integerChanges(n)
	case n.is("number"):
		c.numberChanges(n)
	case n.is("boolean"):
		c.add(true, false, "true")
		c.num("0")
	case n.is("object"), n.is("array"):
	default: // any JSON value
		c.add(nil)
		c.num("1.0")
		c.add("", []any{json.Number("1"), []any{}})
	}
	return c
}

// changes collects the values valueChanges tries, each named by its JSON.
type changes []change

func (c *changes) add(vs ...any) {
	for _, v := range vs {
		b, _ := json.Marshal(v)
		*c = append(*c, change{what: string(b), value: v})
	}
}

func (c *changes) num(ss ...string) {
	for _, s := range ss {
		c.add(json.Number(s))
	}
}

// otherKinds are values of every JSON kind n is not.
func (c *changes) otherKinds(n node) {
	if !n.is("string") {
		c.add("x")
	}
	if !n.is("integer") && !n.is("number") {
		c.num("7")
	}
	if !n.is("boolean") {
		c.add(true)
	}
	if !n.is("array") {
		c.add([]any{})
	}
	if !n.is("object") {
		c.add(newObject())
	}
}

// enumChanges are each string of n's enum, the same in another case, and
// two strings outside it.
func (c *changes) enumChanges(n node) {
	for _, v := range n.enum() {
		if s, ok := v.(string); ok {
			c.add(s)
			if u := strings.ToUpper(s); u != s {
				c.add(u)
			} else {
				c.add(strings.ToLower(s))
			}
		}
	}
	c.add("nope", "")
}

var dateTimeChanges = []any{
	"2026-01-02T03:04:05Z", "2026-01-02T03:04:05+02:00", "2026-01-02T03:04:05-00:00",
	"2026-01-02T03:04:05.123456789Z", "2026-01-02T03:04:05.1Z", "2026-01-02T03:04:05.123456789123Z",
	"2026-01-02t03:04:05Z", "2026-01-02T03:04:05z", "2016-12-31T23:59:60Z", "2026-01-02 03:04:05Z",
	"2026-02-30T03:04:05Z", "2026-01-02T03:04:05", "2026-01-02T24:00:00Z", "2026-01-02T03:04:05+0200",
	"2026-01-02", "0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59Z", "",
}

var uuidChanges = []any{
	"6F1C2A8E-1D2B-4C3D-9E4F-5A6B7C8D9E0F", "6f1c2a8e1d2b4c3d9e4f5a6b7c8d9e0f",
	"{6f1c2a8e-1d2b-4c3d-9e4f-5a6b7c8d9e0f}", "urn:uuid:6f1c2a8e-1d2b-4c3d-9e4f-5a6b7c8d9e0f",
	"00000000-0000-0000-0000-000000000000", "6f1c2a8e-1d2b-4c3d-9e4f-5a6b7c8d9e0", "not-a-uuid", "",
}

var base64Changes = []any{"", "AAEC", "AAE=", "AA==", "QR==", "AAE", "AA", "AAEC\n", "AA EC", "AAE!", "AAEC===", "-_8="}

// stringChanges are short strings and, with a maxLength, strings at and
// past it in runes and in bytes.
func (c *changes) stringChanges(n node) {
	c.add("", "a")
	if m := n.rat("maxLength"); m != nil {
		l := int(m.Num().Int64())
		c.add(strings.Repeat("é", l), strings.Repeat("é", l+1), strings.Repeat("a", l+1))
	}
}

// integerChanges are integers in many spellings and each bound of n,
// one below and one above.
func (c *changes) integerChanges(n node) {
	c.num("0", "-1", "1", "1.0", "1e2", "1E1", "-0", "1.5", "1e19", "-1e19", "2147483648", "-2147483649", "1e400")
	c.add("1")
	for _, key := range []string{"minimum", "maximum", "exclusiveMinimum"} {
		b := n.rat(key)
		if b == nil {
			continue
		}
		for _, d := range []int64{-1, 0, 1} {
			v := new(big.Rat).Add(b, big.NewRat(d, 1))
			*c = append(*c, change{what: key + fmt.Sprintf("%+d", d), value: json.Number(v.Num().String()),
				beyondJS: new(big.Int).Abs(v.Num()).Cmp(big.NewInt(1<<53)) > 0})
		}
	}
}

// numberChanges are numbers at the edges of float64 and each bound of n,
// a tenth below and above.
func (c *changes) numberChanges(n node) {
	c.num("1.5", "1", "0.1", "-0.0", "1E2", "1e308", "1.7976931348623157e308", "1e400", "-1e400", "1e-400")
	c.add("1.5")
	for _, key := range []string{"minimum", "maximum"} {
		if b := n.rat(key); b != nil && b.Num().BitLen() < 64 {
			for _, d := range []*big.Rat{big.NewRat(-1, 10), new(big.Rat), big.NewRat(1, 10)} {
				v := new(big.Rat).Add(b, d)
				*c = append(*c, change{what: key + " " + d.FloatString(1), value: json.Number(decimal(v))})
			}
		}
	}
}

// other is a value of the same JSON kind as v, of another text, among
// those that replace one of schema n (or, failing that, of another kind):
// a key in another case holding it would be misread silently.
func other(n node, v any) any {
	was, _ := json.Marshal(v)
	var fallback any = "other"
	for _, c := range valueChanges(n) {
		b, _ := json.Marshal(c.value)
		if c.beyondJS || bytes.Equal(b, was) {
			continue
		}
		if jsonKind(b) == jsonKind(was) {
			return c.value
		}
		fallback = c.value
	}
	return fallback
}

func jsonKind(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	switch c := b[0]; {
	case c == '-' || c >= '0' && c <= '9':
		return '0'
	case c == 't' || c == 'f':
		return 't'
	default:
		return c
	}
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case *Object:
		o := newObject()
		for _, k := range x.Keys {
			o.Set(k, deepCopy(x.Vals[k]))
		}
		for k, v := range x.Before {
			o.setBefore(k, deepCopy(v))
		}
		return o
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}
