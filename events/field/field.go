// Package field declares the fields of an event payload version. The
// builders read like ent's schema/field package:
//
//	field.Int64("order_id").Comment("the order being paid")
//	field.String("currency").Default("EUR")
//	field.Enum("method").Values("card", "transfer")
//	field.Time("paid_at").Optional()
//
// Fields are required unless marked Optional or Nillable. What required
// means depends on the kind: strings, enums, times, UUIDs, bytes and JSON
// must be non-zero; numbers and bools always have a value (use Nillable to
// tell "absent" from zero); lists and maps must be non-nil.
//
// # Nested payloads
//
// Objects, lists and maps with string keys nest to any depth:
//
//	field.Object("address", field.String("street"), field.String("city").Optional())
//	field.Objects("lines", field.String("sku"), field.Int("qty").Min(1))
//	field.List("sizes", field.Enum("").Values("S", "M", "L"))
//	field.Map("attributes", field.String(""))
//	field.Map("stock", field.Object("", field.Int("on_hand")))
//
// Their Descriptor is a tree, read by the code generator, the lock file and
// the JSON Schema writer alike:
//
//   - KindObject: Fields holds the object's fields, each a full Descriptor.
//     A required object is always present; an Optional or Nillable one may
//     be absent (a nil pointer in Go, no key on the wire).
//   - KindList: Elem describes every element (a list of any kind, objects
//     included). Objects(name, fields...) is List(name, Object("", fields...)):
//     the element object's fields are Elem.Fields.
//   - KindMap: keys are strings; Elem describes every value. For a map of
//     objects, the value object's fields are Elem.Fields.
//
// An element (Elem) has an empty Name, is never Nillable nor defaulted
// (declare defaults on the fields of an element object) and is required
// like a field: an empty string element is refused unless the element is
// Optional (an element object cannot be). Its other options (Values, Min,
// Max, Positive, MaxLen, its own Fields or Elem) constrain every element.
//
// Generated code: a nested object is a named struct (OrderPlacedAddress,
// OrderPlacedLine for the elements of "lines", OrderPlacedV1Line in an older
// version), a value when required and a pointer when optional. Validation
// errors name the path: lines[2].sku, attributes["k"].value. A path
// in a declaration error uses "[]" for a list's element and "{}" for a
// map's value: "lines[].sku". The older flat list kinds
// (KindStrings, KindInts, KindInt64s, KindFloat64s) stay as they were: a
// list of scalars with no element constraints and no Elem.
package field

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Kind is the type of a field's value.
type Kind uint8

// The kinds of field values.
const (
	KindInvalid Kind = iota
	KindString
	KindBool
	KindInt
	KindInt32
	KindInt64
	KindFloat64
	KindTime
	KindUUID
	KindEnum
	KindBytes
	KindJSON
	KindStrings
	KindInts
	KindInt64s
	KindFloat64s
	KindObject // Descriptor.Fields are its fields
	KindList   // Descriptor.Elem describes each element
	KindMap    // string keys; Descriptor.Elem describes each value
)

var kindNames = [...]string{"invalid", "string", "bool", "int", "int32", "int64", "float64",
	"time", "uuid", "enum", "bytes", "json", "strings", "ints", "int64s", "float64s",
	"object", "list", "map"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Numeric reports whether values of k are numbers.
func (k Kind) Numeric() bool {
	return k == KindInt || k == KindInt32 || k == KindInt64 || k == KindFloat64
}

// Nested reports whether values of k hold other values described by the
// Descriptor's Fields (KindObject) or Elem (KindList, KindMap).
func (k Kind) Nested() bool { return k == KindObject || k == KindList || k == KindMap }

// Field is implemented by every builder.
type Field interface {
	Descriptor() *Descriptor
}

// Descriptor is the declaration of one field, read by the code generator.
// Nested kinds make it a tree (see the package doc): a KindObject's fields
// are in Fields, a KindList's element and a KindMap's value are described by
// Elem, whose own Fields hold an element object's fields. Walk it with
// Fields and Elem recursively; no other field of Descriptor nests.
type Descriptor struct {
	Name     string // wire (JSON) name
	Kind     Kind
	Optional bool
	Nillable bool // generated as a pointer (or a nil slice), implies Optional
	Default  any  // used when the value is zero, and when an older version lacks the field
	Comment  string
	Enum     []string // allowed values of a KindEnum field
	Min, Max *float64 // bounds of a numeric field
	Positive bool     // a numeric field must be > 0
	MaxLen   int      // maximum length of a string field; 0 means none

	Fields []*Descriptor // KindObject: the object's fields, in declaration order
	Elem   *Descriptor   // KindList: each element; KindMap: each value. Elem.Name is ""
}

// Builder builds a Descriptor. T is the Go type of the field's value, so a
// Default of the wrong type does not compile.
type Builder[T any] struct {
	desc *Descriptor
}

func newBuilder[T any](name string, kind Kind) *Builder[T] {
	return &Builder[T]{desc: &Descriptor{Name: name, Kind: kind}}
}

// String declares a string field.
func String(name string) *Builder[string] { return newBuilder[string](name, KindString) }

// Bool declares a bool field.
func Bool(name string) *Builder[bool] { return newBuilder[bool](name, KindBool) }

// Int declares an int field.
func Int(name string) *Builder[int] { return newBuilder[int](name, KindInt) }

// Int32 declares an int32 field.
func Int32(name string) *Builder[int32] { return newBuilder[int32](name, KindInt32) }

// Int64 declares an int64 field.
func Int64(name string) *Builder[int64] { return newBuilder[int64](name, KindInt64) }

// Float64 declares a float64 field.
func Float64(name string) *Builder[float64] { return newBuilder[float64](name, KindFloat64) }

// Time declares a time.Time field, encoded as RFC 3339 with nanoseconds.
func Time(name string) *Builder[time.Time] { return newBuilder[time.Time](name, KindTime) }

// UUID declares a uuid.UUID field.
func UUID(name string) *Builder[uuid.UUID] { return newBuilder[uuid.UUID](name, KindUUID) }

// Enum declares a string field restricted to the values given with Values.
func Enum(name string) *Builder[string] { return newBuilder[string](name, KindEnum) }

// Bytes declares a []byte field, encoded as base64 in JSON.
func Bytes(name string) *Builder[[]byte] { return newBuilder[[]byte](name, KindBytes) }

// JSON declares a free-form JSON field (json.RawMessage).
func JSON(name string) *Builder[json.RawMessage] {
	return newBuilder[json.RawMessage](name, KindJSON)
}

// Strings declares a []string field.
func Strings(name string) *Builder[[]string] { return newBuilder[[]string](name, KindStrings) }

// Ints declares an []int field.
func Ints(name string) *Builder[[]int] { return newBuilder[[]int](name, KindInts) }

// Int64s declares an []int64 field.
func Int64s(name string) *Builder[[]int64] { return newBuilder[[]int64](name, KindInt64s) }

// Float64s declares a []float64 field.
func Float64s(name string) *Builder[[]float64] { return newBuilder[[]float64](name, KindFloat64s) }

// Object declares an object field whose own fields are fields, generated
// as a named struct. A required object is always present; Optional or
// Nillable makes it a pointer that may be nil (absent on the wire).
func Object(name string, fields ...Field) *NestedBuilder {
	return &NestedBuilder{desc: &Descriptor{Name: name, Kind: KindObject, Fields: descriptors(fields)}}
}

// Objects declares a list of objects with the given fields: List(name,
// Object("", fields...)). Line items, for instance.
func Objects(name string, fields ...Field) *NestedBuilder {
	return List(name, Object("", fields...))
}

// List declares a list whose every element is declared by elem, a builder
// of any kind (its name is dropped): field.List("sizes",
// field.Enum("").Values("S", "M")). Elements cannot be optional, nillable or
// defaulted; a required list must be non-nil, and an empty list is a value.
// A list of lists is List(name, List("", ...)).
func List(name string, elem Field) *NestedBuilder {
	return &NestedBuilder{desc: &Descriptor{Name: name, Kind: KindList, Elem: element(elem)}}
}

// Map declares a map with string keys whose every value is declared by
// value (its name is dropped): field.Map("attributes", field.String("")).
func Map(name string, value Field) *NestedBuilder {
	return &NestedBuilder{desc: &Descriptor{Name: name, Kind: KindMap, Elem: element(value)}}
}

// descriptors reads the declarations of nested fields; a nil field stays
// nil for the code generator to report.
func descriptors(fields []Field) []*Descriptor {
	out := make([]*Descriptor, len(fields))
	for i, f := range fields {
		if f != nil {
			out[i] = f.Descriptor()
		}
	}
	return out
}

func element(f Field) *Descriptor {
	if f == nil {
		return nil
	}
	d := f.Descriptor()
	if d != nil {
		d.Name = ""
	}
	return d
}

// NestedBuilder builds an object, list or map field. They take no default:
// a default of an object lives on its fields.
type NestedBuilder struct {
	desc *Descriptor
}

// Optional lets the field be absent: a nil pointer (objects), list or map.
func (b *NestedBuilder) Optional() *NestedBuilder { b.desc.Optional = true; return b }

// Nillable is Optional: an optional object is already a pointer and lists
// and maps are nil-able.
func (b *NestedBuilder) Nillable() *NestedBuilder {
	b.desc.Nillable, b.desc.Optional = true, true
	return b
}

// Comment documents the field in the generated struct.
func (b *NestedBuilder) Comment(c string) *NestedBuilder { b.desc.Comment = c; return b }

// Descriptor returns the declaration built so far.
func (b *NestedBuilder) Descriptor() *Descriptor { return b.desc }

// Optional lets the field be left at its zero value.
func (b *Builder[T]) Optional() *Builder[T] { b.desc.Optional = true; return b }

// Nillable generates the field as a pointer, so "absent" and zero differ.
// It implies Optional.
func (b *Builder[T]) Nillable() *Builder[T] {
	b.desc.Nillable, b.desc.Optional = true, true
	return b
}

// Default is the value of the field when an older version of the event
// lacks it. At Emit it also replaces a value that means "absent": a nil
// pointer (Nillable) or an empty string; a plain number or bool is always a
// value of its own, so 0 and false are emitted as they are.
func (b *Builder[T]) Default(v T) *Builder[T] { b.desc.Default = v; return b }

// Comment documents the field in the generated struct.
func (b *Builder[T]) Comment(c string) *Builder[T] { b.desc.Comment = c; return b }

// Values lists the allowed values of an Enum field.
func (b *Builder[T]) Values(values ...string) *Builder[T] {
	b.desc.Enum = append(b.desc.Enum, values...)
	return b
}

// Min is the smallest allowed value of a numeric field.
func (b *Builder[T]) Min(v float64) *Builder[T] { b.desc.Min = &v; return b }

// Max is the largest allowed value of a numeric field.
func (b *Builder[T]) Max(v float64) *Builder[T] { b.desc.Max = &v; return b }

// Positive requires a numeric field to be greater than zero.
func (b *Builder[T]) Positive() *Builder[T] { b.desc.Positive = true; return b }

// MaxLen bounds the length of a string field, in characters (Unicode code
// points), as JSON Schema's maxLength counts them.
func (b *Builder[T]) MaxLen(n int) *Builder[T] { b.desc.MaxLen = n; return b }

// Descriptor returns the declaration built so far.
func (b *Builder[T]) Descriptor() *Descriptor { return b.desc }
