package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/entoutbox/entoutbox/events/field"
)

// upcastGaps lists why version next cannot be filled in automatically from
// version prev: a consumer written for next receives prev's payloads. Only
// added fields that are optional or have a default, and kinds that read
// what they replace (readsKind), are automatic, at any depth: the fields of
// objects, and of the objects in lists and maps, are compared by path.
func upcastGaps(prev, next *Version) []string {
	return fieldGaps(prev.Fields, next.Fields)
}

func fieldGaps(prevFields, nextFields []*Field) []string {
	old := map[string]*Field{}
	for _, f := range prevFields {
		old[f.Name] = f
	}
	var gaps []string
	for _, f := range nextFields {
		o, ok := old[f.Name]
		delete(old, f.Name)
		switch {
		case !ok && !f.Optional && f.Default == nil:
			gaps = append(gaps, fmt.Sprintf("field %q is new, required and has no default", f.Path))
		case !ok:
		case o.Optional && !f.Optional && f.Default == nil:
			gaps = append(gaps, fmt.Sprintf("field %q was optional and is now required", f.Path))
			gaps = append(gaps, valueGaps(o, f)...)
		case o.Default != nil && f.Default == nil && !f.Optional:
			// The schema of prev does not require it: a payload may lack it.
			gaps = append(gaps, fmt.Sprintf("field %q lost its default %#v", f.Path, o.Default))
			gaps = append(gaps, valueGaps(o, f)...)
		default:
			gaps = append(gaps, valueGaps(o, f)...)
		}
	}
	for _, f := range prevFields {
		if _, ok := old[f.Name]; ok {
			gaps = append(gaps, fmt.Sprintf("field %q was removed", f.Path))
		}
	}
	return gaps
}

// valueGaps compares the values of a field (or element) in two versions:
// kind, enum values and, for nested kinds, what they hold.
func valueGaps(o, f *Field) []string {
	if o.Kind != f.Kind {
		if readsKind(o.Kind, f.Kind) {
			return nil
		}
		return []string{fmt.Sprintf("field %q changed kind from %s to %s", f.Path, shape(o), shape(f))}
	}
	switch f.Kind {
	case field.KindEnum:
		var dropped []string
		for _, v := range o.Enum {
			if !slices.Contains(f.Enum, v) {
				dropped = append(dropped, v)
			}
		}
		if len(dropped) > 0 {
			return []string{fmt.Sprintf("field %q dropped enum values %v", f.Path, dropped)}
		}
	case field.KindObject:
		return fieldGaps(o.Fields, f.Fields)
	case field.KindList, field.KindMap:
		if !readsKind(o.Elem.Kind, f.Elem.Kind) {
			return []string{fmt.Sprintf("field %q changed kind from %s to %s", f.Path, shape(o), shape(f))}
		}
		if o.Elem.Optional && !f.Elem.Optional {
			return []string{fmt.Sprintf("field %q was optional and is now required", f.Elem.Path)}
		}
		return valueGaps(o.Elem, f.Elem)
	}
	return nil
}

// shape names a field's kind with what its lists and maps hold: "list of
// object", "map of list of int".
func shape(f *Field) string {
	switch f.Kind {
	case field.KindList, field.KindMap:
		return fmt.Sprintf("%s of %s", f.Kind, shape(f.Elem))
	}
	return f.Kind.String()
}

// planUpcasts marks the version steps that need the declaration's Upcast
// and records those it needs but lacks (Event.missingUpcasts): they are
// refused last, after the lock's refusals (upcasterRefusals).
func planUpcasts(where string, e *Event, hasUpcaster bool) {
	for i := 1; i < len(e.Versions); i++ {
		prev, next := e.Versions[i-1], e.Versions[i]
		gaps := upcastGaps(prev, next)
		if len(gaps) == 0 {
			prev.NextDefaults = defaultsLiteral(next.Fields)
			prev.NextFill = fillDefaults(next.Fields, "fields", 1, "consumer.FillDefaults")
			prev.EmitFill = fillDefaults(next.Fields, "fields", 1, "outbox.FillDefaults")
			continue
		}
		prev.UpcastManually = true
		e.NeedsUpcaster = true
		if !hasUpcaster {
			e.missingUpcasts = append(e.missingUpcasts, missingUpcast{from: prev.Number, to: next.Number,
				refusal: fmt.Sprintf("%s: versions %d -> %d need an upcaster: %s; implement events.Upcaster on %s: func (%s) Upcast(from int, fields map[string]any) (map[string]any, error)",
					where, prev.Number, next.Number, strings.Join(gaps, "; "), e.GoName, e.GoName)})
		}
	}
}

// missingUpcast is a version step that needs the declaration's Upcast,
// which it lacks.
type missingUpcast struct {
	from, to int
	refusal  string
}

// upcasterRefusals refuses the steps that need an upcaster the declaration
// lacks, but those from or to a version in frozen (by entryKey): a released
// version whose shape changed. The gaps of such a step come from the
// change the lock refuses, and restoring the version is the fix, not an
// upcaster.
func (m *Model) upcasterRefusals(frozen map[string]bool) []string {
	var out []string
	for _, e := range m.Events {
		for _, s := range e.missingUpcasts {
			if !frozen[entryKey(e.Name, s.from)] && !frozen[entryKey(e.Name, s.to)] {
				out = append(out, s.refusal)
			}
		}
	}
	return out
}

// defaultsLiteral is a Go map literal of the declared defaults of fs by
// wire name, or "" when it has none: an automatic step in the JSON upcast
// path fills them in for the manual steps after it.
func defaultsLiteral(fs []*Field) string {
	var parts []string
	for _, f := range fs {
		if f.Default != nil {
			parts = append(parts, fmt.Sprintf("%q: %#v", f.Name, f.Default))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "map[string]any{" + strings.Join(parts, ", ") + "}"
}

// fillDefaults are the statements of an automatic step in the JSON upcast
// path: the defaults of fs go into the decoded object m where its keys are
// missing (through fill, the runtime's FillDefaults), and into the objects
// m holds, in lists and maps too, at any depth. "" when there are none.
func fillDefaults(fs []*Field, m string, depth int, fill string) string {
	var out []string
	if lit := defaultsLiteral(fs); lit != "" {
		out = append(out, fmt.Sprintf("%s(%s, %s)", fill, m, lit))
	}
	for _, f := range fs {
		if inner := fillValue(f, fmt.Sprintf("%s[%q]", m, f.Name), depth, fill); inner != "" {
			out = append(out, inner)
		}
	}
	return strings.Join(out, "\n")
}

// fillValue fills the defaults of the objects held by the decoded value
// expr of f.
func fillValue(f *Field, expr string, depth int, fill string) string {
	switch f.Kind {
	case field.KindObject:
		o := fmt.Sprintf("o%d", depth)
		inner := fillDefaults(f.Fields, o, depth+1, fill)
		if inner == "" {
			return ""
		}
		return fmt.Sprintf("if %s, ok := %s.(map[string]any); ok {\n%s\n}", o, expr, inner)
	case field.KindList, field.KindMap:
		c, x := fmt.Sprintf("c%d", depth), fmt.Sprintf("x%d", depth)
		inner := fillValue(f.Elem, x, depth+1, fill)
		if inner == "" {
			return ""
		}
		typ := "[]any"
		if f.Kind == field.KindMap {
			typ = "map[string]any"
		}
		return fmt.Sprintf("if %s, ok := %s.(%s); ok {\nfor _, %s := range %s {\n%s\n}\n}", c, expr, typ, x, c, inner)
	}
	return ""
}
