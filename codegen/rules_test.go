package codegen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

func descs(fs ...field.Field) []*field.Descriptor {
	out := make([]*field.Descriptor, len(fs))
	for i, f := range fs {
		out[i] = f.Descriptor()
	}
	return out
}

// TestStepRules classifies one change per rule between two versions, flat
// and nested, and says whether the step stays forward compatible.
func TestStepRules(t *testing.T) {
	id := func() field.Field { return field.Int64("id") }
	tests := []struct {
		name       string
		prev, next []*field.Descriptor
		want       []string // "RULE path"
		forward    bool
	}{
		{"add optional", descs(id()), descs(id(), field.String("note").Optional()), []string{"FIELD_ADD_OPTIONAL note"}, true},
		{"add with default", descs(id()), descs(id(), field.String("c").Default("EUR")), []string{"FIELD_ADD_OPTIONAL c"}, true},
		{"add required", descs(id()), descs(id(), field.String("note")), []string{"FIELD_ADD_REQUIRED note"}, true},
		{"remove optional", descs(id(), field.String("note").Optional()), descs(id()), []string{"FIELD_REMOVE_OPTIONAL note"}, true},
		{"remove defaulted", descs(id(), field.String("c").Default("EUR")), descs(id()), []string{"FIELD_REMOVE_OPTIONAL c"}, true},
		{"remove required", descs(id(), field.String("note")), descs(id()), []string{"FIELD_REMOVE_REQUIRED note"}, false},
		{"kind", descs(field.Int64("id")), descs(field.String("id")), []string{"FIELD_KIND_CHANGE id"}, false},
		{"require", descs(field.String("n").Optional()), descs(field.String("n")), []string{"FIELD_REQUIRE n"}, true},
		{"require with default", descs(field.String("n").Optional()), descs(field.String("n").Default("x")), nil, true},
		{"relax", descs(field.String("n")), descs(field.String("n").Optional()), []string{"FIELD_RELAX n"}, false},
		{"enum add", descs(field.Enum("t").Values("a")), descs(field.Enum("t").Values("a", "b")), []string{"ENUM_VALUE_ADD t"}, false},
		{"enum remove", descs(field.Enum("t").Values("a", "b")), descs(field.Enum("t").Values("a")), []string{"ENUM_VALUE_REMOVE t"}, true},
		{"max up", descs(field.Int("q").Max(10)), descs(field.Int("q").Max(11)), []string{"BOUNDS_LOOSEN q"}, false},
		{"max down", descs(field.Int("q").Max(10)), descs(field.Int("q").Max(9)), []string{"BOUNDS_TIGHTEN q"}, true},
		{"positive added", descs(field.Int("q")), descs(field.Int("q").Positive()), []string{"BOUNDS_TIGHTEN q"}, true},
		{"positive to min 1", descs(field.Int("q").Positive()), descs(field.Int("q").Min(1)), []string{"BOUNDS_TIGHTEN q"}, true},
		{"min 1 to positive", descs(field.Int("q").Min(1)), descs(field.Int("q").Positive()), []string{"BOUNDS_LOOSEN q"}, false},
		{"maxlen dropped", descs(field.String("s").MaxLen(3)), descs(field.String("s")), []string{"BOUNDS_LOOSEN s"}, false},
		{"default", descs(field.String("c").Default("EUR")), descs(field.String("c").Default("USD")), []string{"DEFAULT_CHANGE c"}, true},
		{"default removed", descs(field.String("c").Default("EUR")), descs(field.String("c")), []string{"DEFAULT_REMOVE c"}, true},
		{"default removed, optional now", descs(field.String("c").Default("EUR")), descs(field.String("c").Optional()), []string{"FIELD_RELAX c"}, false},
		{"int to int64", descs(field.Int("q")), descs(field.Int64("q")), []string{"FIELD_KIND_SAME_WIRE q"}, true},
		{"int64s to ints", descs(field.Int64s("q")), descs(field.Ints("q")), []string{"FIELD_KIND_SAME_WIRE q"}, true},
		{"int32 to int64", descs(field.Int32("q")), descs(field.Int64("q")), []string{"FIELD_KIND_WIDEN q"}, false},
		{"int32 to float64", descs(field.Int32("q")), descs(field.Float64("q")), []string{"FIELD_KIND_WIDEN q"}, false},
		{"int to float64", descs(field.Int("q")), descs(field.Float64("q")), []string{"FIELD_KIND_TO_FLOAT q"}, false},
		{"int64 to int32", descs(field.Int64("q")), descs(field.Int32("q")), []string{"FIELD_KIND_NARROW q"}, true},
		{"int to int32", descs(field.Int("q")), descs(field.Int32("q")), []string{"FIELD_KIND_NARROW q"}, true},
		{"float64 to int", descs(field.Float64("q")), descs(field.Int("q")), []string{"FIELD_KIND_NARROW q"}, true},
		{"float64 to int32", descs(field.Float64("q")), descs(field.Int32("q")), []string{"FIELD_KIND_NARROW q"}, true},
		{"float64s to int64s", descs(field.Float64s("q")), descs(field.Int64s("q")), []string{"FIELD_KIND_NARROW q"}, true},
		{"list element narrowed", descs(field.List("sizes", field.Float64(""))),
			descs(field.List("sizes", field.Int(""))), []string{"FIELD_KIND_NARROW sizes[]"}, true},
		{"int to string", descs(field.Int("q")), descs(field.String("q")), []string{"FIELD_KIND_CHANGE q"}, false},
		{"float64 to string", descs(field.Float64("q")), descs(field.String("q")), []string{"FIELD_KIND_CHANGE q"}, false},
		{"widened and relaxed", descs(field.Int32("q")), descs(field.Int64("q").Optional().Max(5)),
			[]string{"FIELD_KIND_WIDEN q", "FIELD_RELAX q", "BOUNDS_TIGHTEN q"}, false},
		{"same", descs(id(), field.String("c").Comment("x")), descs(id(), field.String("c").Comment("y")), nil, true},

		{"nested add required", descs(field.Object("address", field.String("city"))),
			descs(field.Object("address", field.String("city"), field.String("zip"))), []string{"FIELD_ADD_REQUIRED address.zip"}, true},
		{"list element field relaxed", descs(field.Objects("lines", field.String("sku"))),
			descs(field.Objects("lines", field.String("sku").Optional())), []string{"FIELD_RELAX lines[].sku"}, false},
		{"map value enum", descs(field.Map("stock", field.Enum("").Values("a"))),
			descs(field.Map("stock", field.Enum("").Values("a", "b"))), []string{"ENUM_VALUE_ADD stock{}"}, false},
		{"list element kind", descs(field.List("sizes", field.Int(""))),
			descs(field.List("sizes", field.String(""))), []string{"FIELD_KIND_CHANGE sizes[]"}, false},
		{"list element widened", descs(field.List("sizes", field.Int32(""))),
			descs(field.List("sizes", field.Int64(""))), []string{"FIELD_KIND_WIDEN sizes[]"}, false},
		{"deep removal", descs(field.Map("m", field.Object("", field.Objects("xs", field.Int("a"), field.Int("b"))))),
			descs(field.Map("m", field.Object("", field.Objects("xs", field.Int("a"))))), []string{"FIELD_REMOVE_REQUIRED m{}.xs[].b"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			forward := true
			for _, c := range stepChanges("", tt.prev, tt.next) {
				got = append(got, c.rule+" "+c.path)
				forward = forward && keepsForward(c.rule)
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.forward, forward, "forward compatible")
		})
	}
}

// TestLockDiffNested names a changed nested field of a released version by
// its path.
func TestLockDiffNested(t *testing.T) {
	was := lockFields(descs(field.Objects("lines", field.String("sku"), field.Int("qty").Min(1)), field.Map("tags", field.String(""))))
	now := lockFields(descs(field.Objects("lines", field.String("sku").MaxLen(8), field.Int("qty").Min(1).Optional()), field.Map("tags", field.Int(""))))
	var got []string
	for _, d := range diffFields("", was, now) {
		got = append(got, d.path+": "+d.what)
	}
	require.Equal(t, []string{
		"lines[].qty: changed from required to optional",
		"lines[].sku: bounds changed from none to (length <= 8)",
		"tags{}: kind changed from string to int",
	}, got)
}

// TestRuleNameReuseNested refuses a nested name that comes back with
// another kind after a version without it.
func TestRuleNameReuseNested(t *testing.T) {
	v := func(n int, fs ...field.Field) *Version {
		var out []*Field
		for _, d := range descs(fs...) {
			out = append(out, &Field{Descriptor: d})
		}
		return &Version{Number: n, Fields: out}
	}
	e := &Event{GoName: "OrderPlaced", Name: "order.placed", Versions: []*Version{
		v(1, field.Objects("lines", field.String("sku"))),
		v(2, field.Objects("lines", field.String("code"))),
		v(3, field.Objects("lines", field.Int64("sku"))),
	}}
	var errs []string
	checkNameReuse(eventWhere(e), e, func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) })
	require.Equal(t, []string{`event OrderPlaced ("order.placed") version 3, field "lines[].sku": the name was a string field until version 1 and comes back as int64; a removed field's name is never reused with another kind (rule FIELD_NAME_REUSE): choose a new name`}, errs)
}

// TestEveryRuleHasAGoldenCase finds, for each rule, its case under
// testdata: a refusal that says what the rule is about, or for a
// compatible change the lock of rules_compatible, whose event named after
// the rule records the rule's level.
func TestEveryRuleHasAGoldenCase(t *testing.T) {
	// The refusals codegen/upcast.go writes name the change, not the rule.
	upcastText := map[string]string{
		RuleFieldAddRequired:    `field "region" is new, required and has no default`,
		RuleFieldRemoveOptional: `field "author" was removed`,
		RuleFieldRemoveRequired: `field "card_last4" was removed`,
		RuleFieldKindChange:     `field "cents" changed kind from int64 to string`,
		RuleFieldRequire:        `field "currency" was optional and is now required`,
		RuleEnumValueRemove:     `field "tier" dropped enum values [c]`,
		RuleDefaultRemove:       `field "currency" lost its default "EUR"`,
		RuleFieldKindNarrow:     `field "price" changed kind from float64 to int`,
	}
	lock, err := os.ReadFile(filepath.Join("testdata", "rules_compatible", "ent", LockFile))
	require.NoError(t, err)
	var l Lock
	require.NoError(t, json.Unmarshal(lock, &l))
	for _, r := range Rules {
		dir := filepath.Join("testdata", r.Case)
		require.DirExists(t, dir, "rule %s", r.ID)
		if r.Case == "rules_compatible" {
			e := l.Entry(strings.ToLower(r.ID), 2)
			require.NotNil(t, e, "rule %s: rules_compatible declares no event %q", r.ID, strings.ToLower(r.ID))
			require.Equal(t, r.Level == LevelFull || r.Level == LevelForward, *e.ForwardCompatible, "rule %s: forward compatible", r.ID)
			require.Equal(t, r.Level == LevelFull || r.Level == LevelBackward, *e.BackwardCompatible, "rule %s: backward compatible", r.ID)
			continue
		}
		if e := l.Entry(strings.ToLower(r.ID), 2); e != nil {
			// A rule that requires an upcaster shows its levels there too.
			require.Equal(t, r.Level == LevelFull || r.Level == LevelForward, *e.ForwardCompatible, "rule %s: forward compatible", r.ID)
			require.Equal(t, r.Level == LevelFull || r.Level == LevelBackward, *e.BackwardCompatible, "rule %s: backward compatible", r.ID)
		}
		stderr, err := os.ReadFile(filepath.Join(dir, "stderr.txt"))
		require.NoError(t, err, "rule %s", r.ID)
		want := "(rule " + r.ID + ")"
		if text, ok := upcastText[r.ID]; ok {
			want = text
		}
		require.Contains(t, string(stderr), want, "rule %s", r.ID)
	}
}

// TestReferenceHasTheRulesTable keeps the reference's table the same as
// Rules.
func TestReferenceHasTheRulesTable(t *testing.T) {
	reference, err := os.ReadFile(filepath.Join("..", "docs", "reference.md"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(reference), RulesTable()), "docs/reference.md must hold the rules table as codegen.RulesTable renders it:\n%s", RulesTable())
}

// TestReadLockRefusesWhatItCannotRead: a lock that does not parse, or of a
// later format, stops generation instead of being overwritten.
func TestReadLockRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	l, err := ReadLock(dir)
	require.NoError(t, err)
	require.Empty(t, l.Events)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LockFile), []byte(`{"format": 1, "events": [{"event": "x", "colour": 1}]}`), 0o644))
	_, err = ReadLock(dir)
	require.EqualError(t, err, `entoutbox: reading entoutbox.lock.json: json: unknown field "colour" (restore it from version control)`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LockFile), []byte(`{"format": 2, "events": []}`), 0o644))
	_, err = ReadLock(dir)
	require.EqualError(t, err, "entoutbox: entoutbox.lock.json has format 2; this generator writes format 1 (upgrade entoutbox)")
}

// TestDraftOnlyLast: the Draft mark reaches the lock.
func TestDraftMarksTheVersion(t *testing.T) {
	v := events.V(2, field.Int64("id")).Draft()
	require.True(t, v.IsDraft)
	require.False(t, events.V(2).IsDraft)
}

// TestReadmeShowsTheLockRefusal: the refusal the README quotes is the one
// an edit of the quick start's released version 1 gets.
func TestReadmeShowsTheLockRefusal(t *testing.T) {
	version := func(n int, fs ...field.Field) *Version {
		var out []*Field
		for _, d := range descs(fs...) {
			out = append(out, &Field{Descriptor: d})
		}
		return &Version{Number: n, Fields: out}
	}
	event := func(amount field.Field) *Model {
		return &Model{Events: []*Event{{GoName: "OrderPaid", Name: "order.paid", Topic: "orders", Aggregate: "Order", Versions: []*Version{
			version(1, field.Int64("order_id"), amount),
			version(2, field.Int64("order_id"), field.Int64("amount_cents").Positive(),
				field.Enum("currency").Values("EUR", "USD").Default("EUR")),
		}}}}
	}
	var errs []string
	fail := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	released := event(field.Int64("amount_cents"))
	old, _ := compareLock(released, lockEntries(released, nil, fail), &Lock{}, fail)
	require.Empty(t, errs)

	edited := event(field.String("amount_cents"))
	compareLock(edited, lockEntries(edited, nil, fail), old, fail)
	require.Len(t, errs, 1)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	quoted := "entoutbox: invalid event declarations:\n\t" + errs[0] + "\n"
	require.True(t, strings.Contains(string(readme), quoted), "README.md must quote the refusal as it is:\n%s", quoted)
}
