package codegen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/entoutbox/entoutbox/events"
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
// and records them (Event.manualSteps), with what the declaration says of
// its Upcast: whether Upcast handles them is checked last, after the
// lock's refusals (upcasterRefusals).
func planUpcasts(e *Event, ev events.Interface) {
	_, e.upcaster.has = ev.(events.Upcaster)
	if d, ok := ev.(interface{ UpcastSteps() []int }); ok {
		e.upcaster.declared, e.upcaster.steps = true, d.UpcastSteps()
	}
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
		e.manualSteps = append(e.manualSteps, manualStep{from: prev.Number, to: next.Number, gaps: gaps})
	}
}

// upcaster is what a declaration says of its Upcast.
type upcaster struct {
	has      bool  // it implements events.Upcaster
	declared bool  // it implements UpcastSteps (events.UpcastStepper)
	steps    []int // what UpcastSteps lists: the versions Upcast upcasts from
}

// manualStep is a version step that needs the declaration's Upcast, and
// why (upcastGaps).
type manualStep struct {
	from, to int
	gaps     []string
}

// upcasterRefusals refuses the steps that need an upcaster the declaration
// does not have for them: it has no Upcast, or its UpcastSteps does not
// list the step, or it does not declare UpcastSteps while more than one
// step needs Upcast (a bare Upcast is taken to handle a single step, as
// it was written for one). A listed step that is not one of these is
// refused too: Upcast is never called for it. Steps from or to a version
// in frozen (by entryKey) are left out: a released version whose shape
// changed. The gaps of such a step come from the change the lock refuses,
// and restoring the version is the fix, not an upcaster.
func (m *Model) upcasterRefusals(frozen map[string]bool) []string {
	var out []string
	for _, e := range m.Events {
		out = append(out, e.upcasterRefusals(frozen)...)
	}
	return out
}

func (e *Event) upcasterRefusals(frozen map[string]bool) []string {
	where := eventWhere(e)
	touchesFrozen := func(from int) bool {
		return frozen[entryKey(e.Name, from)] || frozen[entryKey(e.Name, from+1)]
	}
	var needed []int
	for _, s := range e.manualSteps {
		needed = append(needed, s.from)
	}
	declare := fmt.Sprintf("func (%s) UpcastSteps() []int { return %s }", e.GoName, intsLiteral(needed))
	redeclare := "declare " + declare
	if len(needed) == 0 {
		redeclare = "remove UpcastSteps, as no step needs an upcaster"
	}
	var out []string
	for _, s := range e.manualSteps {
		if touchesFrozen(s.from) {
			continue
		}
		step := fmt.Sprintf("%s: versions %d -> %d need an upcaster: %s", where, s.from, s.to, strings.Join(s.gaps, "; "))
		switch {
		case !e.upcaster.has:
			fix := fmt.Sprintf("; implement events.Upcaster on %s: func (%s) Upcast(from int, fields map[string]any) (map[string]any, error)",
				e.GoName, e.GoName)
			if len(needed) > 1 {
				fix += fmt.Sprintf(", handling each of the %d steps (%s), and declare them: %s", len(needed), stepList(needed), declare)
			}
			out = append(out, step+fix)
		case e.upcaster.declared && !slices.Contains(e.upcaster.steps, s.from):
			out = append(out, fmt.Sprintf("%s; %s's Upcast handles %s (UpcastSteps): handle from == %d in Upcast, and declare it: %s",
				step, e.GoName, handledList(e.upcaster.steps), s.from, declare))
		case !e.upcaster.declared && len(needed) > 1:
			out = append(out, fmt.Sprintf("%s; %s's Upcast does not say which steps it handles, and %d steps need one (%s): handle each in Upcast and declare them: %s",
				step, e.GoName, len(needed), stepList(needed), declare))
		}
	}
	listed := map[int]bool{}
	for _, from := range e.upcaster.steps {
		if listed[from] {
			continue
		}
		listed[from] = true
		switch {
		case from < 1 || from >= len(e.Versions):
			out = append(out, fmt.Sprintf("%s: UpcastSteps lists %d, but there is no step %d -> %d (its versions are 1 to %d); it lists the versions Upcast upcasts from, 1 for 1 -> 2: %s",
				where, from, from, from+1, len(e.Versions), redeclare))
		case !slices.Contains(needed, from) && !touchesFrozen(from):
			out = append(out, fmt.Sprintf("%s: UpcastSteps lists %d, but versions %d -> %d need no upcaster (defaults fill older payloads in), so Upcast is never called for them: %s",
				where, from, from, from+1, redeclare))
		}
	}
	return out
}

// stepList names steps by the versions they upcast from: "1 -> 2, 2 -> 3".
func stepList(froms []int) string {
	parts := make([]string, len(froms))
	for i, f := range froms {
		parts[i] = fmt.Sprintf("%d -> %d", f, f+1)
	}
	return strings.Join(parts, ", ")
}

// handledList says which steps an UpcastSteps lists.
func handledList(froms []int) string {
	switch len(froms) {
	case 0:
		return "no step"
	case 1:
		return stepList(froms) + " only"
	}
	return stepList(slices.Sorted(slices.Values(froms)))
}

// intsLiteral is froms as a Go []int literal.
func intsLiteral(froms []int) string {
	parts := make([]string, len(froms))
	for i, f := range froms {
		parts[i] = strconv.Itoa(f)
	}
	return "[]int{" + strings.Join(parts, ", ") + "}"
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
