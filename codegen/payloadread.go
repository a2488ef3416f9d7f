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
		r.function(v.TypeName, fmt.Sprintf("a checked %q payload", e.Name), v.Fields)
		for _, s := range v.Structs {
			r.function(s.TypeName, fmt.Sprintf("%q of a checked %q payload", s.Path, e.Name), s.Fields)
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

func (r *reader) function(typeName, what string, fields []*Field) {
	w := r.b
	fmt.Fprintf(w, "// %s reads the fields of %s into e (see consumer.PayloadReader).\n", readerName(typeName), what)
	fmt.Fprintf(w, "func %s(doc map[string]any, raw []byte, e *%s) bool {\n", readerName(typeName), typeName)
	fmt.Fprintf(w, "\tfor k, v := range doc {\n\t\tswitch k {\n")
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = strconv.Quote(f.Name)
		fmt.Fprintf(w, "\t\tcase %s:\n", strconv.Quote(f.Name))
		w.WriteString(indent(r.field("e."+f.GoName, "v", f, 0), 3))
	}
	fmt.Fprintf(w, "\t\tdefault:\n\t\t\tif consumer.PayloadKeyFolds(k, %s) {\n\t\t\t\treturn false\n\t\t\t}\n", strings.Join(names, ", "))
	fmt.Fprintf(w, "\t\t}\n\t}\n\treturn true\n}\n\n")
}

// field is the Go that sets dst, field or element f, from src, a value of
// the document; depth names its variables apart from the enclosing ones'.
func (r *reader) field(dst, src string, f *Field, depth int) string {
	d := strconv.Itoa(depth)
	nilable := pointer(f) || !scalar(f.Kind) && f.Kind != field.KindJSON
	var set string
	switch {
	case pointer(f) && f.Kind == field.KindObject:
		set = fmt.Sprintf("m%[1]s, ok := %[2]s.(map[string]any)\nif !ok {\n\treturn false\n}\np%[1]s := new(%[3]s)\n%[4]sif !%[5]s(m%[1]s, nil, p%[1]s) {\n\treturn false\n}\n%[6]s = p%[1]s\n",
			d, src, f.Struct.TypeName, prefill(f, "p"+d), readerName(f.Struct.TypeName), dst)
	case pointer(f):
		set = r.value("x"+d, src, f, depth) + fmt.Sprintf("%s = &x%s\n", dst, d)
	case f.Kind == field.KindObject:
		set = fmt.Sprintf("m%[1]s, ok := %[2]s.(map[string]any)\nif !ok {\n\treturn false\n}\n%[3]sif !%[4]s(m%[1]s, nil, &%[5]s) {\n\treturn false\n}\n",
			d, src, prefill(f, dst), readerName(f.Struct.TypeName), dst)
	case f.Kind == field.KindList || f.Kind == field.KindStrings || f.Kind == field.KindInts ||
		f.Kind == field.KindInt64s || f.Kind == field.KindFloat64s:
		elem := listElem(f)
		set = fmt.Sprintf("a%[1]s, ok := %[2]s.([]any)\nif !ok {\n\treturn false\n}\ns%[1]s := make(%[3]s, len(a%[1]s))\nfor i%[1]s, v%[1]s := range a%[1]s {\n%[4]s}\n%[5]s = s%[1]s\n",
			d, src, strings.TrimPrefix(f.GoType, "*"), indent(r.field(fmt.Sprintf("s%s[i%s]", d, d), "v"+d, elem, depth+1), 1), dst)
	case f.Kind == field.KindMap:
		set = fmt.Sprintf("m%[1]s, ok := %[2]s.(map[string]any)\nif !ok {\n\treturn false\n}\nt%[1]s := make(%[3]s, len(m%[1]s))\nfor k%[1]s, v%[1]s := range m%[1]s {\n\tvar x%[1]s %[4]s\n%[5]s\tt%[1]s[k%[1]s] = x%[1]s\n}\n%[6]s = t%[1]s\n",
			d, src, f.GoType, f.Elem.GoType, indent(r.field("x"+d, "v"+d, f.Elem, depth+1), 1), dst)
	default:
		set = r.value("x"+d, src, f, depth) + fmt.Sprintf("%s = x%s\n", dst, d)
	}
	if !nilable { // null leaves such a value as it is, or calls its UnmarshalJSON: encoding/json's to read
		return set
	}
	return fmt.Sprintf("if %s == nil {\n\t%s = nil\n} else {\n%s}\n", src, dst, indent(set, 1))
}

// value is the Go that declares x, the scalar value of f read from src.
func (r *reader) value(x, src string, f *Field, depth int) string {
	refuse := "if !ok {\n\treturn false\n}\n"
	base := strings.TrimPrefix(f.GoType, "*")
	switch f.Kind {
	case field.KindString, field.KindEnum:
		if base != "string" {
			return fmt.Sprintf("s%d, ok := %s.(string)\n%s%s := %s(s%d)\n", depth, src, refuse, x, base, depth)
		}
		return fmt.Sprintf("%s, ok := %s.(string)\n%s", x, src, refuse)
	case field.KindBool:
		return fmt.Sprintf("%s, ok := %s.(bool)\n%s", x, src, refuse)
	case field.KindInt, field.KindInt32, field.KindInt64:
		bits := map[field.Kind]int{field.KindInt: 0, field.KindInt32: 32, field.KindInt64: 64}[f.Kind]
		return fmt.Sprintf("n%d, ok := consumer.PayloadInt(%s, %d)\n%s%s := %s(n%d)\n", depth, src, bits, refuse, x, base, depth)
	case field.KindFloat64:
		return fmt.Sprintf("%s, ok := consumer.PayloadFloat(%s)\n%s", x, src, refuse)
	case field.KindTime:
		return fmt.Sprintf("%s, ok := consumer.PayloadTime(%s)\n%s", x, src, refuse)
	case field.KindUUID:
		return fmt.Sprintf("var %s %s\nif !consumer.PayloadText(%s, &%s) {\n\treturn false\n}\n", x, base, src, x)
	case field.KindBytes:
		return fmt.Sprintf("%s, ok := consumer.PayloadBytes(%s)\n%s", x, src, refuse)
	case field.KindJSON:
		return fmt.Sprintf("%s, ok := consumer.PayloadRaw(raw, %s)\n%s", x, strconv.Quote(f.Name), refuse)
	}
	panic(fmt.Sprintf("entoutbox: no reader for kind %d", f.Kind)) // readable and render know every kind
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

// prefill is the call that sets the declared defaults of object f's
// struct, as its UnmarshalJSON does before encoding/json reads it, or "".
func prefill(f *Field, sel string) string {
	if !f.Struct.HasPrefill() {
		return ""
	}
	return sel + ".outboxPrefill()\n"
}

// indent indents every line of code by n tabs.
func indent(code string, n int) string {
	tabs := strings.Repeat("\t", n)
	lines := strings.SplitAfter(code, "\n")
	for i, l := range lines {
		if l != "" && l != "\n" {
			lines[i] = tabs + l
		}
	}
	return strings.Join(lines, "")
}
