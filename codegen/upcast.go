package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/entoutbox/entoutbox/events/field"
)

// upcastGaps lists why version next cannot be filled in automatically from
// version prev: a consumer written for next receives prev's payloads. Only
// added fields that are optional or have a default are automatic.
func upcastGaps(prev, next *Version) []string {
	old := map[string]*Field{}
	for _, f := range prev.Fields {
		old[f.Name] = f
	}
	var gaps []string
	for _, f := range next.Fields {
		o, ok := old[f.Name]
		delete(old, f.Name)
		switch {
		case !ok && !f.Optional && f.Default == nil:
			gaps = append(gaps, fmt.Sprintf("field %q is new, required and has no default", f.Name))
		case !ok:
		case o.Kind != f.Kind:
			gaps = append(gaps, fmt.Sprintf("field %q changed kind from %s to %s", f.Name, o.Kind, f.Kind))
		case o.Optional && !f.Optional && f.Default == nil:
			gaps = append(gaps, fmt.Sprintf("field %q was optional and is now required", f.Name))
		case f.Kind == field.KindEnum:
			var dropped []string
			for _, v := range o.Enum {
				if !slices.Contains(f.Enum, v) {
					dropped = append(dropped, v)
				}
			}
			if len(dropped) > 0 {
				gaps = append(gaps, fmt.Sprintf("field %q dropped enum values %v", f.Name, dropped))
			}
		}
	}
	for _, f := range prev.Fields {
		if _, ok := old[f.Name]; ok {
			gaps = append(gaps, fmt.Sprintf("field %q was removed", f.Name))
		}
	}
	return gaps
}

// planUpcasts marks the version steps that need the declaration's Upcast
// and reports a declaration that needs one but has none.
func planUpcasts(where string, e *Event, hasUpcaster bool, fail func(string, ...any)) {
	for i := 1; i < len(e.Versions); i++ {
		prev, next := e.Versions[i-1], e.Versions[i]
		gaps := upcastGaps(prev, next)
		if len(gaps) == 0 {
			prev.NextDefaults = defaultsLiteral(next)
			continue
		}
		prev.UpcastManually = true
		e.NeedsUpcaster = true
		if !hasUpcaster {
			fail("%s: versions %d -> %d need an upcaster: %s; implement events.Upcaster on %s: func (%s) Upcast(from int, fields map[string]any) (map[string]any, error)",
				where, prev.Number, next.Number, strings.Join(gaps, "; "), e.GoName, e.GoName)
		}
	}
}

// defaultsLiteral is a Go map literal of v's declared defaults by wire
// name, or "" when it has none: an automatic step in the JSON upcast path
// fills them in for the manual steps after it.
func defaultsLiteral(v *Version) string {
	var parts []string
	for _, f := range v.Fields {
		if f.Default != nil {
			parts = append(parts, fmt.Sprintf("%q: %#v", f.Name, f.Default))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "map[string]any{" + strings.Join(parts, ", ") + "}"
}
