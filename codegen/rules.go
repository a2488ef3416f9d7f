package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/entoutbox/entoutbox/events/field"
)

// The rule ids, as the refusals and the reference's table name them (in the
// manner of buf breaking's rule ids).
const (
	RuleFieldAddOptional    = "FIELD_ADD_OPTIONAL"
	RuleFieldAddRequired    = "FIELD_ADD_REQUIRED"
	RuleFieldRemoveOptional = "FIELD_REMOVE_OPTIONAL"
	RuleFieldRemoveRequired = "FIELD_REMOVE_REQUIRED"
	RuleFieldKindChange     = "FIELD_KIND_CHANGE"
	RuleFieldKindSameWire   = "FIELD_KIND_SAME_WIRE"
	RuleFieldKindWiden      = "FIELD_KIND_WIDEN"
	RuleFieldKindToFloat    = "FIELD_KIND_TO_FLOAT"
	RuleFieldKindNarrow     = "FIELD_KIND_NARROW"
	RuleFieldRequire        = "FIELD_REQUIRE"
	RuleFieldRelax          = "FIELD_RELAX"
	RuleEnumValueAdd        = "ENUM_VALUE_ADD"
	RuleEnumValueRemove     = "ENUM_VALUE_REMOVE"
	RuleBoundsLoosen        = "BOUNDS_LOOSEN"
	RuleBoundsTighten       = "BOUNDS_TIGHTEN"
	RuleDefaultChange       = "DEFAULT_CHANGE"
	RuleDefaultRemove       = "DEFAULT_REMOVE"
	RuleFieldNameReuse      = "FIELD_NAME_REUSE"
	RuleEventNameKept       = "EVENT_NAME_KEPT"
	RuleEventKept           = "EVENT_KEPT"
	RuleEventRetired        = "EVENT_RETIRED"
	RuleEventRouteKept      = "EVENT_ROUTE_KEPT"
	RuleVersionFrozen       = "VERSION_FROZEN"
	RuleVersionKept         = "VERSION_KEPT"
	RuleNoRedraft           = "VERSION_NO_REDRAFT"
	RuleDraftLast           = "DRAFT_LAST"
)

// Rule levels. Backward: a consumer of the new version reads payloads of
// the old one (the generated upcast fills them in). Forward: a consumer of
// the old version reads payloads of the new one (it ignores fields it does
// not know). Full: both.
const (
	LevelFull     = "full"
	LevelBackward = "backward"
	LevelForward  = "forward"     // backward needs an upcaster (or, for bounds, may dead-letter)
	LevelNone     = "none"        // neither way: an upcaster for backward
	LevelNever    = "never"       // refused
	LevelLock     = "lock"        // refused against the lock
	LevelDraft    = "draft order" // refused
)

// Rule is one row of the compatibility table.
type Rule struct {
	ID     string
	Change string // what the declaration does, between versions N and N+1 unless said
	Level  string
	Action string // what the generator does
	Case   string // the golden case under codegen/testdata that shows it
}

// Rules is the compatibility table, in docs/reference.md's order.
var Rules = []Rule{
	{RuleFieldAddOptional, "a field is added, optional or with a default", LevelFull,
		"fills it in from its default (or leaves it absent) on older payloads", "rules_compatible"},
	{RuleFieldAddRequired, "a required field without a default is added", LevelForward,
		"requires an upcaster", "missing_upcaster"},
	{RuleFieldRemoveOptional, "an optional field, or one with a default, is removed", LevelForward,
		"requires an upcaster (say where the value went, or drop it)", "rule_remove_optional"},
	{RuleFieldRemoveRequired, "a required field is removed", LevelNone,
		"requires an upcaster; not forward: older consumers miss it", "removed_field"},
	{RuleFieldKindChange, "a field changes kind (but as the four rules below)", LevelNone,
		"requires an upcaster", "missing_upcaster"},
	{RuleFieldKindSameWire, "a field changes to a kind of the same wire shape: `int` and `int64`, `ints` and `int64s`", LevelFull,
		"nothing to do: the JSON and its schema stay the same; only the Go type changes", "rules_compatible"},
	{RuleFieldKindWiden, "an `int32` field becomes `int`, `int64` or `float64`", LevelBackward,
		"nothing to do; not forward: older consumers refuse values beyond `int32`", "rules_compatible"},
	{RuleFieldKindToFloat, "an `int` or `int64` field (or list) becomes `float64` (`float64s`)", LevelBackward,
		"nothing to do; not forward: older consumers refuse fractions. Integers beyond 2^53 lose precision as `float64`", "rules_compatible"},
	{RuleFieldKindNarrow, "a number field (or list) narrows: `float64` becomes an integer kind, `int` or `int64` becomes `int32`", LevelForward,
		"requires an upcaster (older payloads may hold fractions or values beyond the new kind); forward: older consumers read every narrower value, an older `float64` rounding integers beyond 2^53", "rule_kind_narrow"},
	{RuleFieldRequire, "an optional field becomes required without a default", LevelForward,
		"requires an upcaster", "missing_upcaster"},
	{RuleFieldRelax, "a required field becomes optional, or gets a default (its schema no longer requires the key)", LevelBackward,
		"nothing to do; not forward: older consumers require it", "rules_compatible"},
	{RuleEnumValueAdd, "an enum gains values", LevelBackward,
		"nothing to do; not forward: older consumers refuse the new values", "rules_compatible"},
	{RuleEnumValueRemove, "an enum loses values", LevelForward,
		"requires an upcaster", "missing_upcaster"},
	{RuleBoundsLoosen, "bounds widen (Min, Max, Positive, MaxLen)", LevelBackward,
		"nothing to do; not forward: older consumers refuse values out of their bounds", "rules_compatible"},
	{RuleBoundsTighten, "bounds narrow (Min, Max, Positive, MaxLen)", LevelForward,
		"accepts it: an older payload out of the new bounds is dead-lettered with the validation error (an upcaster that runs for the step may repair it); `backward_compatible` is false", "rules_compatible"},
	{RuleDefaultChange, "a default changes", LevelFull,
		"nothing to do: producers write the value; the default fills older payloads", "rules_compatible"},
	{RuleDefaultRemove, "a required field loses its default", LevelForward,
		"requires an upcaster: an older payload may lack the field (its schema does not require it)", "rule_default_remove"},
	{RuleFieldNameReuse, "a field removed in an earlier version comes back with another kind", LevelNever,
		"refuses: readers of any version see one name with two kinds; choose a new name", "rule_field_name_reuse"},
	{RuleEventNameKept, "an event's wire name changes (its Go type is in the lock under another)", LevelLock,
		"refuses: consumers and stored rows know the event by its wire name", "rule_event_name_kept"},
	{RuleEventKept, "a released event is no longer declared: deleted, or its Go type and wire name renamed at once", LevelLock,
		"refuses: stored and in-flight events have its wire name; retire it by adding `\"retired\": true` to its entries in the lock, in a reviewed change", "rule_event_kept"},
	{RuleEventRetired, "an event retired in the lock is declared again", LevelLock,
		"refuses: choose a new wire name, or remove `\"retired\"` from its entries (its released versions are then held again)", "rule_event_retired"},
	{RuleEventRouteKept, "a released event's Topic() or Aggregate() changes", LevelLock,
		"refuses: consumers subscribe to the topic, and order by the aggregate", "rule_event_route_kept"},
	{RuleVersionFrozen, "the wire shape of a released version changes (a field added, removed, or its kind, presence, enum, default, bounds or nested fields)", LevelLock,
		"refuses, naming the field; declare a new version", "rule_version_frozen"},
	{RuleVersionKept, "a released version is no longer declared", LevelLock,
		"refuses: stored and in-flight payloads have that version", "rule_version_kept"},
	{RuleNoRedraft, "a released version is marked Draft()", LevelLock,
		"refuses", "rule_no_redraft"},
	{RuleDraftLast, "a released version follows a Draft()", LevelDraft,
		"refuses: drafts are the newest versions", "rule_draft_last"},
}

// ruleLevels are the levels of Rules by id.
var ruleLevels = func() map[string]string {
	m := map[string]string{}
	for _, r := range Rules {
		m[r.ID] = r.Level
	}
	return m
}()

// keepsForward tells whether a consumer of the older version still reads
// the newer one after a change of the rule.
func keepsForward(rule string) bool {
	l := ruleLevels[rule]
	return l == LevelFull || l == LevelForward
}

// keepsBackward tells whether a consumer of the newer version still reads
// every payload of the older one after a change of the rule, without an
// upcaster.
func keepsBackward(rule string) bool {
	l := ruleLevels[rule]
	return l == LevelFull || l == LevelBackward
}

// stepChange is one change between consecutive versions.
type stepChange struct {
	rule, path, what string
}

// stepChanges classifies how fields change from one version to the next,
// recursively over what they nest.
func stepChanges(prefix string, prev, next []*field.Descriptor) []stepChange {
	var out []stepChange
	old := map[string]*field.Descriptor{}
	for _, d := range prev {
		old[d.Name] = d
	}
	kept := map[string]bool{}
	for _, n := range next {
		path := prefix + n.Name
		o := old[n.Name]
		if o == nil {
			if n.Optional || n.Default != nil {
				out = append(out, stepChange{RuleFieldAddOptional, path, "is new and optional"})
			} else {
				out = append(out, stepChange{RuleFieldAddRequired, path, "is new, required and has no default"})
			}
			continue
		}
		kept[n.Name] = true
		out = append(out, stepField(path, o, n)...)
	}
	for _, o := range prev {
		if kept[o.Name] {
			continue
		}
		// An older consumer fills a field with a default in before decoding.
		if o.Optional || o.Default != nil {
			out = append(out, stepChange{RuleFieldRemoveOptional, prefix + o.Name, "was removed"})
		} else {
			out = append(out, stepChange{RuleFieldRemoveRequired, prefix + o.Name, "was removed"})
		}
	}
	return out
}

// stepField classifies how one field (or element) kept from one version to
// the next changes, with what it nests.
func stepField(path string, o, n *field.Descriptor) []stepChange {
	var out []stepChange
	if o.Kind != n.Kind {
		rule := kindChangeRule(o.Kind, n.Kind)
		out = append(out, stepChange{rule, path, fmt.Sprintf("changed kind from %s to %s", o.Kind, n.Kind)})
		if rule == RuleFieldKindChange {
			return out
		}
	}
	// Emit writes a default for an absent value, so a field with one is
	// always on the wire from Go; the schema does not require it, so a
	// payload from elsewhere may lack it.
	switch {
	case o.Optional && !n.Optional && n.Default == nil:
		out = append(out, stepChange{RuleFieldRequire, path, "was optional and is now required"})
	case !o.Optional && n.Optional && n.Default == nil:
		out = append(out, stepChange{RuleFieldRelax, path, "was required and is now optional"})
	case !o.Optional && o.Default == nil && n.Default != nil:
		// A payload of the newer version may lack the key, which the
		// older version's schema and consumers require.
		out = append(out, stepChange{RuleFieldRelax, path, fmt.Sprintf("was required and now has the default %#v", n.Default)})
	case o.Default != nil && n.Default == nil && !n.Optional:
		out = append(out, stepChange{RuleDefaultRemove, path, fmt.Sprintf("lost its default %#v", o.Default)})
	}
	if o.Default != nil && n.Default != nil && fmt.Sprintf("%#v", o.Default) != fmt.Sprintf("%#v", n.Default) {
		out = append(out, stepChange{RuleDefaultChange, path, fmt.Sprintf("default changed from %#v to %#v", o.Default, n.Default)})
	}
	if n.Kind == field.KindEnum {
		if added := missing(n.Enum, o.Enum); len(added) > 0 {
			out = append(out, stepChange{RuleEnumValueAdd, path, fmt.Sprintf("gained enum values %v", added)})
		}
		if dropped := missing(o.Enum, n.Enum); len(dropped) > 0 {
			out = append(out, stepChange{RuleEnumValueRemove, path, fmt.Sprintf("dropped enum values %v", dropped)})
		}
	}
	ob, nb := boundsText(lockField(o)), boundsText(lockField(n))
	if narrower(o, n) {
		out = append(out, stepChange{RuleBoundsTighten, path, fmt.Sprintf("narrowed its bounds from %s to %s", ob, nb)})
	}
	if narrower(n, o) {
		out = append(out, stepChange{RuleBoundsLoosen, path, fmt.Sprintf("widened its bounds from %s to %s", ob, nb)})
	}
	if n.Kind == field.KindObject {
		out = append(out, stepChanges(path+".", o.Fields, n.Fields)...)
	}
	if o.Elem != nil && n.Elem != nil {
		out = append(out, stepField(elemPath(path, n.Kind.String()), o.Elem, n.Elem)...)
	}
	return out
}

// kindChangeRule classifies a change of kind from o to n: the same wire
// shape, a widening of numbers (exact, or to float64), a narrowing of
// numbers, or any other. As Confluent Schema Registry classifies the JSON
// Schemas (integer to number is TYPE_EXTENDED, wider integer bounds are
// MAXIMUM_INCREASED and MINIMUM_DECREASED): a widening is backward
// compatible, a narrowing forward compatible.
func kindChangeRule(o, n field.Kind) string {
	type change struct{ from, to field.Kind }
	switch (change{o, n}) {
	case change{field.KindInt, field.KindInt64}, change{field.KindInt64, field.KindInt},
		change{field.KindInts, field.KindInt64s}, change{field.KindInt64s, field.KindInts}:
		return RuleFieldKindSameWire
	case change{field.KindInt32, field.KindInt}, change{field.KindInt32, field.KindInt64},
		change{field.KindInt32, field.KindFloat64}:
		return RuleFieldKindWiden
	case change{field.KindInt, field.KindFloat64}, change{field.KindInt64, field.KindFloat64},
		change{field.KindInts, field.KindFloat64s}, change{field.KindInt64s, field.KindFloat64s}:
		return RuleFieldKindToFloat
	case change{field.KindFloat64, field.KindInt}, change{field.KindFloat64, field.KindInt64},
		change{field.KindFloat64, field.KindInt32}, change{field.KindInt, field.KindInt32},
		change{field.KindInt64, field.KindInt32},
		change{field.KindFloat64s, field.KindInts}, change{field.KindFloat64s, field.KindInt64s}:
		return RuleFieldKindNarrow
	}
	return RuleFieldKindChange
}

// readsKind tells whether a reader of kind n decodes every value written
// as kind o without an upcaster: the same kind, the same wire shape, or a
// widening (not a narrowing).
func readsKind(o, n field.Kind) bool {
	if o == n {
		return true
	}
	rule := kindChangeRule(o, n)
	return rule != RuleFieldKindChange && rule != RuleFieldKindNarrow
}

// missing lists the values of a that b lacks.
func missing(a, b []string) []string {
	var out []string
	for _, v := range a {
		if !slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	return out
}

// narrower tells whether next may refuse a value prev accepted: a lower
// bound raised, an upper bound lowered, a length bound shortened.
func narrower(prev, next *field.Descriptor) bool {
	pl, nl := lowerBound(prev), lowerBound(next)
	switch {
	case nl.set && (!pl.set || nl.value > pl.value || nl.value == pl.value && nl.exclusive && !pl.exclusive):
		return true
	case next.Max != nil && (prev.Max == nil || *next.Max < *prev.Max):
		return true
	case next.MaxLen > 0 && (prev.MaxLen == 0 || next.MaxLen < prev.MaxLen):
		return true
	}
	return false
}

type bound struct {
	set, exclusive bool
	value          float64
}

// lowerBound is the stricter of Min and Positive (> 0).
func lowerBound(d *field.Descriptor) bound {
	var b bound
	if d.Positive {
		b = bound{set: true, exclusive: true}
	}
	if d.Min != nil && (!b.set || *d.Min > b.value) {
		b = bound{set: true, value: *d.Min}
	}
	return b
}

// applyRules checks the steps between the versions of each event (a field
// name reused with another kind is refused) and gives each entry its
// compatibility with the previous version. Which steps need an upcaster is
// upcast.go's plan (upcastGaps): the rules name the same changes.
func applyRules(m *Model, entries []*LockEntry, fail func(string, ...any)) {
	byKey := map[string]*LockEntry{}
	for _, le := range entries {
		byKey[entryKey(le.Event, le.Version)] = le
	}
	for _, e := range m.Events {
		checkNameReuse(eventWhere(e), e, fail)
		for i := 1; i < len(e.Versions); i++ {
			prev, next := e.Versions[i-1], e.Versions[i]
			backward, forward := !prev.UpcastManually, true
			for _, c := range stepChanges("", descriptors(prev.Fields), descriptors(next.Fields)) {
				if forward && !keepsForward(c.rule) {
					next.NotForward = fmt.Sprintf("field %q %s (rule %s)", c.path, c.what, c.rule)
				}
				forward = forward && keepsForward(c.rule)
				backward = backward && keepsBackward(c.rule)
			}
			if le := byKey[entryKey(e.Name, next.Number)]; le != nil {
				le.BackwardCompatible, le.ForwardCompatible = &backward, &forward
			}
			next.ForwardFromPrevious = forward
		}
		setReadableFrom(e)
	}
}

// setReadableFrom gives each version of e the oldest version whose
// consumers read it: the start of the run of forward compatible steps
// that ends at it.
func setReadableFrom(e *Event) {
	for i, v := range e.Versions {
		v.ReadableFrom = v.Number
		if i > 0 && v.ForwardFromPrevious {
			v.ReadableFrom = e.Versions[i-1].ReadableFrom
		}
	}
}

// checkNameReuse refuses a field name that comes back, after versions
// without it, with another kind than it had.
func checkNameReuse(where string, e *Event, fail func(string, ...any)) {
	type seen struct {
		version int
		kind    field.Kind
	}
	last := map[string]seen{}
	var walk func(prefix string, ds []*field.Descriptor, v int)
	walk = func(prefix string, ds []*field.Descriptor, v int) {
		for _, d := range ds {
			path := prefix + d.Name
			if s, ok := last[path]; ok && s.version < v-1 && s.kind != d.Kind && kindChangeRule(s.kind, d.Kind) != RuleFieldKindSameWire {
				fail("%s version %d, field %q: the name was a %s field until version %d and comes back as %s; a removed field's name is never reused with another kind (rule %s): choose a new name",
					where, v, path, s.kind, s.version, d.Kind, RuleFieldNameReuse)
			}
			last[path] = seen{v, d.Kind}
			walk(path+".", d.Fields, v)
			if d.Elem != nil {
				walk("", []*field.Descriptor{{Name: elemPath(path, d.Kind.String()), Kind: d.Elem.Kind,
					Fields: d.Elem.Fields, Elem: d.Elem.Elem}}, v)
			}
		}
	}
	for _, v := range e.Versions {
		walk("", descriptors(v.Fields), v.Number)
	}
}

// RulesTable renders Rules as docs/reference.md's Markdown table.
func RulesTable() string {
	var b strings.Builder
	b.WriteString("| rule | change | level | the generator | golden case |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range Rules {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` |\n", r.ID, r.Change, r.Level, r.Action, r.Case)
	}
	return b.String()
}
