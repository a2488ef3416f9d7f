package codegen

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/entoutbox/entoutbox/events/field"
)

// goTypes is the Go type of each kind's value.
var goTypes = map[field.Kind]string{
	field.KindString: "string", field.KindBool: "bool", field.KindInt: "int", field.KindInt32: "int32",
	field.KindInt64: "int64", field.KindFloat64: "float64", field.KindTime: "time.Time",
	field.KindUUID: "uuid.UUID", field.KindEnum: "string", field.KindBytes: "[]byte",
	field.KindJSON: "json.RawMessage", field.KindStrings: "[]string", field.KindInts: "[]int",
	field.KindInt64s: "[]int64", field.KindFloat64s: "[]float64",
}

// defaultTypes is the dynamic type a Default must have, per kind; kinds
// missing here take no default.
var defaultTypes = map[field.Kind]reflect.Type{
	field.KindString: reflect.TypeFor[string](), field.KindEnum: reflect.TypeFor[string](),
	field.KindBool: reflect.TypeFor[bool](), field.KindInt: reflect.TypeFor[int](),
	field.KindInt32: reflect.TypeFor[int32](), field.KindInt64: reflect.TypeFor[int64](),
	field.KindFloat64: reflect.TypeFor[float64](),
}

// scalar kinds become pointers when Nillable; the others are nil-able
// already. An object is a struct value, a pointer when optional.
func scalar(k field.Kind) bool {
	switch k {
	case field.KindBytes, field.KindJSON, field.KindStrings, field.KindInts, field.KindInt64s, field.KindFloat64s,
		field.KindList, field.KindMap:
		return false
	}
	return true
}

// pointer tells whether f is generated as a pointer: a Nillable scalar or
// an optional object. Elements never are.
func pointer(f *Field) bool {
	if f.elem {
		return false
	}
	d := f.Descriptor
	return d.Nillable && scalar(d.Kind) || d.Kind == field.KindObject && d.Optional
}

// render checks the kind-specific parts of a declaration and fills in the
// Go rendering of f. The nested parts of f (its Struct, its Elem) are
// rendered already.
func render(f *Field, s *scope) error {
	d := f.Descriptor
	base, ok := goTypes[d.Kind]
	switch d.Kind {
	case field.KindObject:
		base, ok = f.Struct.TypeName, true
	case field.KindList:
		base, ok = "[]"+f.Elem.GoType, true
	case field.KindMap:
		base, ok = "map[string]"+f.Elem.GoType, true
	}
	if !ok {
		return fmt.Errorf("unknown kind %d", d.Kind)
	}
	if err := checkOptions(d); err != nil {
		return err
	}
	pointer := pointer(f)
	f.GoType = base
	if pointer {
		f.GoType = "*" + base
	}
	if f.elem {
		return nil // its checks and defaults are made where it is held
	}
	f.Tag = fmt.Sprintf(`json:"%s"`, d.Name)
	if d.Optional {
		f.Tag = fmt.Sprintf(`json:"%s,omitzero"`, d.Name)
	}

	sel := "e." + f.GoName
	// At Emit a default replaces only a value that means "absent": a nil
	// pointer or an empty string. A plain number or bool is always a value;
	// its default serves older versions that lack the field.
	if d.Default != nil {
		lit := fmt.Sprintf("%#v", d.Default)
		set := fmt.Sprintf("%s = %s", sel, lit)
		if pointer {
			set = fmt.Sprintf("v := %s(%s)\n\t%s = &v", base, lit, sel)
		}
		// Before decoding, so that a key absent from an older payload keeps
		// it; a pointer's v is scoped to its own block.
		f.Prefill = set
		if pointer {
			f.Prefill = fmt.Sprintf("{\n\t%s\n}", set)
		}
		if pointer {
			f.Defaults = fmt.Sprintf("if %s == nil {\n\t%s\n}", sel, set)
		} else if d.Kind == field.KindString || d.Kind == field.KindEnum {
			f.Defaults = fmt.Sprintf("if %s == %s {\n\t%s\n}", sel, zero(d.Kind), set)
		}
	}
	// A required object is there even when its key is not: it gets its
	// fields' defaults all the same.
	if d.Kind == field.KindObject && !pointer && f.Struct.HasPrefill() {
		f.Prefill = sel + ".outboxPrefill()"
	}

	// guard is when a present value is checked: a nil pointer or the zero
	// value of an optional field means "absent". A field with an emit-time
	// default is never absent once defaults are applied, so Validate does
	// not ask for it either.
	f.Checks = valueChecks(f, sel, d.Optional || f.Defaults != "")
	f.Nested = nestedChecks(s, f, sel, path{format: d.Name}, 1)
	if nested := nestedDefaults(f, sel, 1); nested != "" {
		f.Defaults = strings.TrimPrefix(f.Defaults+"\n"+nested, "\n")
	}
	return nil
}

// valueChecks are the validations of the value sel of field or element f
// (optional: its zero value means absent).
func valueChecks(f *Field, sel string, optional bool) []*Check {
	d := f.Descriptor
	pointer := pointer(f)
	val := sel // the value, dereferenced
	if pointer {
		val = "*" + sel
	}
	guard := ""
	switch {
	case pointer:
		guard = sel + " != nil && "
	case optional && scalar(d.Kind) && d.Kind != field.KindBool && d.Kind != field.KindObject:
		guard = fmt.Sprintf("%s != %s && ", sel, zero(d.Kind))
	}
	var checks []*Check
	add := func(cond, reason string) { checks = append(checks, &Check{Cond: cond, Reason: reason}) }
	if !optional {
		switch d.Kind {
		case field.KindString, field.KindEnum:
			add(sel+` == ""`, `"is required"`)
		case field.KindTime:
			add(sel+".IsZero()", `"is required"`)
		case field.KindUUID:
			add(sel+" == uuid.Nil", `"is required"`)
		case field.KindBytes:
			add(sel+" == nil", `"is required"`)
		case field.KindJSON:
			add("len("+sel+") == 0", `"is required"`)
		case field.KindStrings, field.KindInts, field.KindInt64s, field.KindFloat64s, field.KindList:
			// nil would go out as JSON null; an empty list is a value ("none").
			add(sel+" == nil", `"is required (nil; give an empty list for none)"`)
		case field.KindMap:
			add(sel+" == nil", `"is required (nil; give an empty map for none)"`)
		}
	}
	switch d.Kind {
	case field.KindEnum:
		var alts []string
		for _, v := range d.Enum {
			alts = append(alts, fmt.Sprintf("%s == %q", val, v))
		}
		format := strconv.Quote("value %q is not one of " + strings.ReplaceAll(fmt.Sprint(d.Enum), "%", "%%"))
		add(fmt.Sprintf("%s!(%s)", guard, strings.Join(alts, " || ")), fmt.Sprintf("fmt.Sprintf(%s, %s)", format, val))
	case field.KindJSON:
		add(fmt.Sprintf("len(%s) > 0 && !json.Valid(%s)", sel, sel), `"is not valid JSON"`)
	}
	if d.MaxLen > 0 {
		// In characters, as JSON Schema's maxLength counts.
		add(fmt.Sprintf("%sutf8.RuneCountInString(%s) > %d", guard, val, d.MaxLen),
			fmt.Sprintf(`fmt.Sprintf("is %%d characters long, more than the maximum %d", utf8.RuneCountInString(%s))`, d.MaxLen, val))
	}
	if d.Positive {
		add(fmt.Sprintf("%s%s <= 0", guard, val), fmt.Sprintf(`fmt.Sprintf("value %%v is not positive", %s)`, val))
	}
	if d.Min != nil {
		lit := num(*d.Min)
		add(fmt.Sprintf("%s%s < %s", guard, val, lit), fmt.Sprintf(`fmt.Sprintf("value %%v is below the minimum %s", %s)`, lit, val))
	}
	if d.Max != nil {
		lit := num(*d.Max)
		add(fmt.Sprintf("%s%s > %s", guard, val, lit), fmt.Sprintf(`fmt.Sprintf("value %%v is above the maximum %s", %s)`, lit, val))
	}
	return checks
}

// path is a Go expression of a value's wire path at run time: a format
// and the loop variables it takes (lines[%d] with i1).
type path struct {
	format string
	args   []string
}

func (p path) index(format, arg string) path {
	return path{format: p.format + format, args: append(slices.Clip(p.args), arg)}
}

func (p path) expr() string {
	if len(p.args) == 0 {
		return strconv.Quote(p.format)
	}
	return fmt.Sprintf("fmt.Sprintf(%s, %s)", strconv.Quote(p.format), strings.Join(p.args, ", "))
}

// nestedChecks are the statements validating what sel, the value of f,
// holds: an object's fields (through its Validate, whose field the path
// is put before) and every element of a list or map, which report their
// path (lines[2].sku, attributes["k"].x). Map keys are visited in order,
// so the error is the same on every run.
func nestedChecks(s *scope, f *Field, sel string, p path, depth int) string {
	d := f.Descriptor
	switch d.Kind {
	case field.KindObject:
		call := fmt.Sprintf("if err := %s.Validate(); err != nil {\n\treturn outboxNestedError(%s, err)\n}", sel, p.expr())
		if pointer(f) {
			call = fmt.Sprintf("if %s != nil {\n\t%s\n}", sel, call)
		}
		return call
	case field.KindList, field.KindMap:
		i, v := fmt.Sprintf("i%d", depth), fmt.Sprintf("v%d", depth)
		var ep path
		var head string
		if d.Kind == field.KindList {
			ep = p.index("[%d]", i)
			head = fmt.Sprintf("for %s, %s := range %s {", i, v, sel)
		} else {
			i = fmt.Sprintf("k%d", depth)
			ep = p.index("[%q]", i)
			head = fmt.Sprintf("for _, %s := range slices.Sorted(maps.Keys(%s)) {\n\t%s := %s[%s]", i, sel, v, sel, i)
		}
		var body []string
		for _, c := range valueChecks(f.Elem, v, f.Elem.Optional) {
			body = append(body, fmt.Sprintf("if %s {\n\treturn &events.ValidationError{Event: %q, Version: %d, Field: %s, Reason: %s}\n}",
				c.Cond, s.event, s.version.Number, ep.expr(), c.Reason))
		}
		if inner := nestedChecks(s, f.Elem, v, ep, depth+1); inner != "" {
			body = append(body, inner)
		}
		if len(body) == 0 {
			return ""
		}
		return head + "\n" + strings.Join(body, "\n") + "\n}"
	}
	return ""
}

// nestedDefaults are the statements applying the defaults of the objects
// sel, the value of f, holds, at any depth, or "".
func nestedDefaults(f *Field, sel string, depth int) string {
	switch f.Kind {
	case field.KindObject:
		if !f.Struct.HasDefaults() {
			return ""
		}
		call := sel + ".outboxSetDefaults()"
		if pointer(f) {
			call = fmt.Sprintf("if %s != nil {\n\t%s\n}", sel, call)
		}
		return call
	case field.KindList:
		i := fmt.Sprintf("i%d", depth)
		inner := nestedDefaults(f.Elem, fmt.Sprintf("%s[%s]", sel, i), depth+1)
		if inner == "" {
			return ""
		}
		return fmt.Sprintf("for %s := range %s {\n%s\n}", i, sel, inner)
	case field.KindMap:
		k, v := fmt.Sprintf("k%d", depth), fmt.Sprintf("v%d", depth)
		inner := nestedDefaults(f.Elem, v, depth+1)
		if inner == "" {
			return ""
		}
		// A map's values are copies: the one with defaults goes back.
		return fmt.Sprintf("for %s, %s := range %s {\n%s\n%s[%s] = %s\n}", k, v, sel, inner, sel, k, v)
	}
	return ""
}

// checkOptions refuses options that do not apply to the field's kind and
// defaults that do not fit it.
func checkOptions(d *field.Descriptor) error {
	if len(d.Enum) > 0 && d.Kind != field.KindEnum {
		return fmt.Errorf("Values() applies only to enum fields, not %s", d.Kind)
	}
	if d.Kind == field.KindEnum {
		if len(d.Enum) == 0 {
			return fmt.Errorf("enum has no values; add .Values(...)")
		}
		seen := map[string]bool{}
		for _, v := range d.Enum {
			if v == "" {
				return fmt.Errorf("enum value is empty")
			}
			if seen[v] {
				return fmt.Errorf("enum value %q is listed twice", v)
			}
			if d.MaxLen > 0 && utf8.RuneCountInString(v) > d.MaxLen {
				return fmt.Errorf("enum value %q is longer than MaxLen %d, so it could never be emitted", v, d.MaxLen)
			}
			seen[v] = true
		}
	}
	if (d.Min != nil || d.Max != nil || d.Positive) && !d.Kind.Numeric() {
		return fmt.Errorf("Min, Max and Positive apply only to numeric fields, not %s", d.Kind)
	}
	if d.Kind != field.KindFloat64 {
		for _, b := range []*float64{d.Min, d.Max} {
			if b != nil && *b != math.Trunc(*b) {
				return fmt.Errorf("bound %v is not a whole number for a %s field", *b, d.Kind)
			}
		}
	}
	if d.Min != nil && d.Max != nil && *d.Min > *d.Max {
		return fmt.Errorf("Min %v is greater than Max %v", *d.Min, *d.Max)
	}
	if d.MaxLen < 0 || d.MaxLen > 0 && d.Kind != field.KindString && d.Kind != field.KindEnum {
		return fmt.Errorf("MaxLen applies only to string fields and must be positive")
	}
	if d.Default == nil {
		return nil
	}
	want, ok := defaultTypes[d.Kind]
	if !ok {
		return fmt.Errorf("a default is not supported for %s fields", d.Kind)
	}
	if got := reflect.TypeOf(d.Default); got != want {
		return fmt.Errorf("default %#v is a %s, which does not fit field kind %s (%s)", d.Default, got, d.Kind, want)
	}
	switch v := d.Default.(type) {
	case string:
		if d.Kind == field.KindEnum && !slices.Contains(d.Enum, v) {
			return fmt.Errorf("default %q is not one of the enum values %v", v, d.Enum)
		}
		if d.MaxLen > 0 && utf8.RuneCountInString(v) > d.MaxLen {
			return fmt.Errorf("default %q is longer than MaxLen %d", v, d.MaxLen)
		}
		if v == "" {
			return fmt.Errorf("default is the empty string, which is the zero value it replaces")
		}
	case int, int32, int64, float64:
		f := reflect.ValueOf(v).Convert(reflect.TypeFor[float64]()).Float()
		if d.Min != nil && f < *d.Min || d.Max != nil && f > *d.Max || d.Positive && f <= 0 {
			return fmt.Errorf("default %v is outside the field's bounds (%s)", v, bounds(d))
		}
	}
	return nil
}

func zero(k field.Kind) string {
	switch k {
	case field.KindString, field.KindEnum:
		return `""`
	case field.KindBool:
		return "false"
	case field.KindTime:
		return "(time.Time{})"
	case field.KindUUID:
		return "uuid.Nil"
	case field.KindBytes, field.KindJSON, field.KindStrings, field.KindInts, field.KindInt64s, field.KindFloat64s,
		field.KindList, field.KindMap:
		return "nil"
	}
	return "0"
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func bounds(d *field.Descriptor) string {
	var parts []string
	if d.Positive {
		parts = append(parts, "> 0")
	}
	if d.Min != nil {
		parts = append(parts, ">= "+num(*d.Min))
	}
	if d.Max != nil {
		parts = append(parts, "<= "+num(*d.Max))
	}
	return strings.Join(parts, ", ")
}
