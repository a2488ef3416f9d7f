package codegen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/entoutbox/entoutbox/events/field"
)

// payloadReaders renders, for the latest version of every event, the Go
// that reads the document its schema check parsed into the version's
// struct (and one function for each nested struct), so that a handler
// does not decode a payload a second time. Each reads as encoding/json
// would and declines (returns false) where it cannot be sure to: a key
// that names a field only regardless of case, a value of another type
// than it was written for; encoding/json then reads the payload.
func payloadReaders(m *Model) string {
	var b bytes.Buffer
	for _, e := range m.Events {
		v := e.Versions[len(e.Versions)-1]
		if payloadReaderName(e) == "" {
			continue
		}
		r := reader{b: &b}
		r.function(v.TypeName, fmt.Sprintf("a checked %q payload", e.Name), v.Fields, false, false)
		for _, s := range v.Structs {
			r.function(s.TypeName, fmt.Sprintf("%q of a checked %q payload", s.Path, e.Name), s.Fields, true, s.HasPrefill())
		}
	}
	return b.String()
}

// payloadReaderName is the reader of e's latest version, or "" when its
// fields hold what a reader does not read: a json.RawMessage below the
// top level (the document no longer holds its text).
func payloadReaderName(e *Event) string {
	v := e.Versions[len(e.Versions)-1]
	for _, f := range v.Fields {
		if !readable(f, true) {
			return ""
		}
	}
	return readerName(v.TypeName)
}

func readerName(typeName string) string { return "outboxRead" + typeName }

func readable(f *Field, top bool) bool {
	switch f.Kind {
	case field.KindJSON:
		return top
	case field.KindObject:
		for _, sub := range f.Fields {
			if !readable(sub, false) {
				return false
			}
		}
	case field.KindList, field.KindMap:
		return readable(f.Elem, false)
	}
	return true
}

// reader writes the reader functions of one event.
type reader struct {
	b *bytes.Buffer
}

// function writes the reader of a struct from a document's object, and
// for a nested struct the reader of a value of it (a field or an element
// that holds one).
func (r *reader) function(typeName, what string, fields []*Field, nested, prefill bool) {
	w := r.b
	fmt.Fprintf(w, "// %s reads the fields of %s into e (see consumer.PayloadReader).\n", readerName(typeName), what)
	fmt.Fprintf(w, "func %s(doc map[string]any, raw []byte, e *%s) bool {\n", readerName(typeName), typeName)
	fmt.Fprintf(w, "\tfor k, v := range doc {\n\t\tswitch k {\n")
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = strconv.Quote(f.Name)
		fmt.Fprintf(w, "\t\tcase %s:\n\t\t\tif !%s {\n\t\t\t\treturn false\n\t\t\t}\n", names[i], r.field(f))
	}
	fmt.Fprintf(w, "\t\tdefault:\n\t\t\tif consumer.PayloadKeyFolds(k, %s) {\n\t\t\t\treturn false\n\t\t\t}\n", strings.Join(names, ", "))
	fmt.Fprintf(w, "\t\t}\n\t}\n\treturn true\n}\n\n")
	if !nested {
		return
	}
	// A value of the struct: an object, read after the declared defaults
	// are set (as its UnmarshalJSON does).
	fmt.Fprintf(w, "// %s reads an object of the document into e, its defaults set first.\n", valueReaderName(typeName))
	fmt.Fprintf(w, "func %s(v any, e *%s) bool {\n\tm, ok := v.(map[string]any)\n\tif !ok {\n\t\treturn false\n\t}\n", valueReaderName(typeName), typeName)
	if prefill {
		fmt.Fprintf(w, "\te.outboxPrefill()\n")
	}
	fmt.Fprintf(w, "\treturn %s(m, nil, e)\n}\n\n", readerName(typeName))
}

// valueReaderName is the reader of a value of the struct typeName.
func valueReaderName(typeName string) string { return readerName(typeName) + "Value" }

// field is the call that reads field f from v, the document's value, into
// e's field (a bool expression).
func (r *reader) field(f *Field) string {
	dst := "&e." + f.GoName
	switch {
	case f.Kind == field.KindJSON:
		return fmt.Sprintf("consumer.PayloadRaw(raw, %s, %s)", strconv.Quote(f.Name), dst)
	case pointer(f):
		return fmt.Sprintf("consumer.PayloadPtr(v, %s, %s)", dst, r.read(f))
	}
	return r.container("v", dst, f)
}

// container is the call that reads src into dst, f's value: through
// PayloadList or PayloadMap for what holds elements, else f's reader.
func (r *reader) container(src, dst string, f *Field) string {
	switch {
	case isList(f):
		return fmt.Sprintf("consumer.PayloadList(%s, %s, %s)", src, dst, r.read(listElem(f)))
	case f.Kind == field.KindMap:
		return fmt.Sprintf("consumer.PayloadMap(%s, %s, %s)", src, dst, r.read(f.Elem))
	}
	return fmt.Sprintf("%s(%s, %s)", r.read(f), src, dst)
}

// read is the reader of a value of f as a Go func(any, *T) bool, T f's
// type without its pointer.
func (r *reader) read(f *Field) string {
	base := strings.TrimPrefix(f.GoType, "*")
	switch f.Kind {
	case field.KindString, field.KindEnum:
		return "consumer.PayloadString"
	case field.KindBool:
		return "consumer.PayloadBool"
	case field.KindInt, field.KindInt32, field.KindInt64:
		return "consumer.PayloadInt[" + base + "]"
	case field.KindFloat64:
		return "consumer.PayloadFloat"
	case field.KindTime:
		return "consumer.PayloadTime"
	case field.KindUUID:
		return "consumer.PayloadText[" + base + "]"
	case field.KindBytes:
		return "consumer.PayloadBytes"
	case field.KindObject:
		return valueReaderName(f.Struct.TypeName)
	}
	if isList(f) || f.Kind == field.KindMap { // an element that holds elements
		return fmt.Sprintf("func(v any, d *%s) bool { return %s }", base, r.container("v", "d", f))
	}
	panic(fmt.Sprintf("entoutbox: no reader for kind %d", f.Kind)) // readable and render know every kind
}

// isList tells whether f is a list, of any kind.
func isList(f *Field) bool {
	switch f.Kind {
	case field.KindList, field.KindStrings, field.KindInts, field.KindInt64s, field.KindFloat64s:
		return true
	}
	return false
}

// listElem is the element of list f: its Elem, or for the lists of plain
// values a field of their element's kind.
func listElem(f *Field) *Field {
	if f.Kind == field.KindList {
		return f.Elem
	}
	kind := map[field.Kind]field.Kind{field.KindStrings: field.KindString, field.KindInts: field.KindInt,
		field.KindInt64s: field.KindInt64, field.KindFloat64s: field.KindFloat64}[f.Kind]
	return &Field{Descriptor: &field.Descriptor{Kind: kind}, GoType: goTypes[kind], elem: true}
}
