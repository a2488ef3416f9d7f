package codegen

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"entgo.io/ent/entc/gen"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// Model is what the templates render: the validated declarations plus the
// facts they need from the ent graph.
type Model struct {
	OutboxTable         string
	ProcessedEventTable string
	DeadLetterTable     string
	// SequenceTable and PositionTable are "" when the schema has no
	// AggregateSequence (Emit then numbers no events) or no
	// ConsumerPosition (consumers then keep no per-aggregate order).
	SequenceTable string
	PositionTable string
	// ScheduledTable is "" when the schema has no ScheduledEvent: Emit
	// then refuses events.DeliverAt and DeliverAfter, naming the schema.
	ScheduledTable string
	Events         []*Event
	declImports    []DeclImport
}

// DeclImport is a declaration package the generated code imports to call
// upcasters.
type DeclImport struct{ Alias, Path string }

// HasConsumers tells whether the consumer side is generated.
func (m *Model) HasConsumers() bool { return m.ProcessedEventTable != "" }

// DeclImports lists the declaration packages the upcasters live in.
func (m *Model) DeclImports() []DeclImport { return m.declImports }

// nameDeclImports gives each declaration package with an upcaster an
// import name in the generated code.
func (m *Model) nameDeclImports() {
	seen := map[string]string{}
	for _, e := range m.Events {
		if !e.NeedsUpcaster {
			continue
		}
		alias, ok := seen[e.DeclPkg]
		if !ok {
			alias = fmt.Sprintf("outboxdecl%d", len(seen)+1)
			seen[e.DeclPkg] = alias
			m.declImports = append(m.declImports, DeclImport{Alias: alias, Path: e.DeclPkg})
		}
		e.DeclAlias = alias
	}
}

// Event is one declared event.
type Event struct {
	GoName    string // Go type of the declaration, also the latest payload struct
	Name      string // wire name
	Topic     string
	Aggregate string
	Comment   string
	Versions  []*Version

	// NeedsUpcaster is set when a version step needs the declaration's
	// Upcast; the generated code then calls it through DeclPkg.DeclType.
	NeedsUpcaster bool
	DeclPkg       string // import path of the declaration
	DeclType      string
	DeclAlias     string // import name of DeclPkg in generated code

	upcaster    upcaster     // what the declaration says of its Upcast
	manualSteps []manualStep // the steps that need its Upcast

	// MaxDelay is how far ahead the event may be scheduled, in
	// nanoseconds (the declaration's MaxDelay); not positive: never.
	MaxDelay int64
}

// MaxDelayExpr is MaxDelay as a Go expression of type time.Duration.
func (e *Event) MaxDelayExpr() string {
	d := time.Duration(e.MaxDelay)
	if d <= 0 {
		return "0"
	}
	if d%(24*time.Hour) == 0 && d > 3*24*time.Hour { // "30 * 24 * time.Hour", "48 * time.Hour"
		return fmt.Sprintf("%d * 24 * time.Hour", d/(24*time.Hour))
	}
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"}} {
		if d%u.d == 0 {
			return fmt.Sprintf("%d * time.%s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("%d", d)
}

// MaxDelayText is MaxDelay for a reader: "366 days", "36h0m0s".
func (e *Event) MaxDelayText() string { return events.FormatDelay(time.Duration(e.MaxDelay)) }

// LastManualStep is the highest version whose step to the next one calls
// Upcast; payloads up to it go through the JSON upcast path.
func (e *Event) LastManualStep() int {
	n := 0
	for _, v := range e.Versions {
		if v.UpcastManually {
			n = v.Number
		}
	}
	return n
}

// Latest is the version producers emit.
func (e *Event) Latest() *Version { return e.Versions[len(e.Versions)-1] }

// Version is one payload version of an event.
type Version struct {
	Number   int
	TypeName string // OrderPaid for the latest, OrderPaidV1 for older ones
	Latest   bool
	Fields   []*Field
	Structs  []*Struct // the nested objects' structs, depth first in declaration order

	// UpcastManually: turning this version into the next one calls the
	// declaration's Upcast.
	UpcastManually bool
	// NextDefaults is a Go literal of the next version's defaults, for an
	// automatic step in the JSON upcast path; NextFill are the statements
	// of that step, which fill nested objects' defaults too.
	NextDefaults string
	NextFill     string
	// EmitFill is NextFill for Emit's read-back of a downcast
	// (events.AsVersion), through package outbox.
	EmitFill string

	// ForwardFromPrevious: consumers of the previous version read this
	// one (rules.go). ReadableFrom is the oldest version whose consumers
	// read it, v itself when the step from the previous one is not
	// forward compatible; the generated Emit writes it with the event.
	ForwardFromPrevious bool
	ReadableFrom        int
	// NotForward says why the step from the previous version is not
	// forward compatible (its first such change), or "".
	NotForward string
}

// Downcasts are the older versions Emit may write instead of the latest
// (events.AsVersion): those whose consumers read the latest.
func (e *Event) Downcasts() []*Version {
	var out []*Version
	for _, v := range e.Versions[:len(e.Versions)-1] {
		if v.Number >= e.Latest().ReadableFrom {
			out = append(out, v)
		}
	}
	return out
}

// NotWritable says why consumers of the versions before the latest's
// ReadableFrom cannot read it: the step into ReadableFrom, which is not
// forward compatible.
func (e *Event) NotWritable() string {
	rf := e.Latest().ReadableFrom
	return fmt.Sprintf("the step from version %d to %d is not forward compatible: %s", rf-1, rf, e.Versions[rf-1].NotForward)
}

// ReadBackUpcasts tells whether Emit's read-back of a downcast runs the
// declaration's Upcast: a version Emit may write comes before a step that
// calls it.
func (e *Event) ReadBackUpcasts() bool {
	ds := e.Downcasts()
	return e.NeedsUpcaster && len(ds) > 0 && ds[0].Number <= e.LastManualStep()
}

// MapPaths are the wire paths of the latest version's map fields, at any
// depth ("attributes", "lines[].tags"), as Go string literals.
func (e *Event) MapPaths() []string {
	var out []string
	var walk func(fs []*Field)
	walk = func(fs []*Field) {
		for _, f := range fs {
			for g := f; g != nil; g = g.Elem {
				if g.Kind == field.KindMap {
					out = append(out, strconv.Quote(g.Path))
				}
				walk(g.Fields)
			}
		}
	}
	walk(e.Latest().Fields)
	return out
}

// EmitDeclImports are the declaration packages the events file imports:
// those whose Upcast Emit's read-back of a downcast calls.
func (m *Model) EmitDeclImports() []DeclImport {
	var out []DeclImport
	for _, imp := range m.declImports {
		if slices.ContainsFunc(m.Events, func(e *Event) bool { return e.DeclAlias == imp.Alias && e.ReadBackUpcasts() }) {
			out = append(out, imp)
		}
	}
	return out
}

// HasDefaults tells whether a field of v has a default that replaces an
// absent value at Emit and after decoding (outboxSetDefaults).
func (v *Version) HasDefaults() bool { return hasDefaults(v.Fields) }

// HasPrefill tells whether a field of v has a default to set before a
// payload is decoded (outboxPrefill).
func (v *Version) HasPrefill() bool { return hasPrefill(v.Fields) }

// Field is one payload field with its Go rendering precomputed, so the
// templates stay free of per-kind logic.
//
// Nested fields mirror their field.Descriptor tree: an object's fields are
// in Fields (and its generated struct is Struct), a list's element or a
// map's value is Elem (a Field with an empty Name and GoName). Path is the
// wire path from the payload's root, with "[]" for a list's element and
// "{}" for a map's value: "address.city", "lines[].sku", "attributes{}.x".
type Field struct {
	*field.Descriptor
	GoName   string
	GoType   string
	Tag      string
	Path     string
	Defaults string   // statements applying defaults to absent values at Emit (nested ones too), or ""
	Prefill  string   // statement setting the default before decoding, or ""
	Checks   []*Check // validations of the field's own value, in order
	Nested   string   // statements validating what the field holds (objects, elements), or ""

	Fields []*Field // KindObject: the object's fields
	Elem   *Field   // KindList, KindMap: each element or value
	Struct *Struct  // KindObject: the named struct generated for it

	elem bool // f is a list's element or a map's value
}

// Struct is a named struct generated for a nested object of one version:
// OrderPlacedAddress for field "address" of the latest version,
// OrderPlacedV1Line for the elements of "lines" in version 1.
type Struct struct {
	TypeName string
	Path     string // wire path of the object ("address", "lines[]")
	Fields   []*Field
}

// HasDefaults tells whether a field of s, or of an object it holds, has a
// default applied at Emit (outboxSetDefaults).
func (s *Struct) HasDefaults() bool { return hasDefaults(s.Fields) }

// HasPrefill tells whether a field of s has a default to set before it is
// decoded (outboxPrefill, called by its UnmarshalJSON).
func (s *Struct) HasPrefill() bool { return hasPrefill(s.Fields) }

func hasDefaults(fs []*Field) bool {
	return slices.ContainsFunc(fs, func(f *Field) bool { return f.Defaults != "" })
}

func hasPrefill(fs []*Field) bool {
	return slices.ContainsFunc(fs, func(f *Field) bool { return f.Prefill != "" })
}

// HasNested tells whether a version of an event has nested objects, whose
// errors the generated code prefixes with their path.
func (m *Model) HasNested() bool {
	for _, e := range m.Events {
		for _, v := range e.Versions {
			if len(v.Structs) > 0 {
				return true
			}
		}
	}
	return false
}

// Check is one validation: when Cond holds, the payload is invalid and
// Reason (a Go string expression) says why.
type Check struct {
	Cond   string
	Reason string
}

var (
	wireName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	topicChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`) // Kafka's characters, the fewest of any broker
	ident      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	goExport   = regexp.MustCompile(`^[A-Z][A-Za-z0-9_]*$`)
)

// outboxFields are the columns the generated code relies on; a type named
// Outbox without them was not built from schema.Outbox.
var (
	outboxFields     = []string{"event_id", "event_name", "event_version", "topic", "aggregate_type", "aggregate_id", "payload", "headers"}
	processedFields  = []string{"consumer", "event_id", "event_name", "attempts", "processed_at"}
	deadLetterFields = []string{"event_id", "source", "event_name", "payload", "headers", "reason", "attempts"}
	sequenceFields   = []string{"topic", "aggregate_type", "aggregate_id", "last_seq"}
	positionFields   = []string{"consumer", "topic", "aggregate_type", "aggregate_id", "last_seq", "held_seq",
		"held_event_id", "held_at", "waiting_since"}
	scheduledFields = []string{"event_id", "event_name", "event_version", "topic", "aggregate_type", "aggregate_id",
		"payload", "headers", "readable_from", "deliver_at", "cancelled_at"}
)

// entSuffixes are the names ent derives from a schema type; an event type
// must not collide with any of them.
var entSuffixes = []string{"", "Client", "Create", "CreateBulk", "Update", "UpdateOne", "Delete",
	"DeleteOne", "Query", "Select", "GroupBy", "Mutation", "s", "Edges", "Upsert", "UpsertOne", "UpsertBulk"}

// build validates the declarations against each other and the ent graph and
// returns the model. All problems are reported at once, each naming the
// event, version and field it is about, and the steps that need an upcaster
// the declaration lacks last. Without other problems, those steps are left
// to checkLock, which refuses them after the lock's refusals.
func build(g *gen.Graph, evs []events.Interface) (*Model, error) {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	m := &Model{}
	m.findTables(g, fail)
	taken := map[string]string{} // Go names generated into the ent package -> owner
	for _, n := range g.Nodes {
		for _, s := range entSuffixes {
			taken[n.Name+s] = fmt.Sprintf("the ent schema %s", n.Name)
		}
	}
	m.Events = buildEvents(evs, fail)
	m.checkGeneratedNames(taken, fail)
	if len(errs) > 0 {
		return nil, refusal(append(errs, m.upcasterRefusals(nil)...))
	}
	m.nameDeclImports()
	return m, nil
}

// findTables notes the tables of our ent schemas that g holds.
func (m *Model) findTables(g *gen.Graph, fail func(string, ...any)) {
	if n := ourNode(g, "Outbox", outboxFields, true, fail); n != nil {
		m.OutboxTable = n.Table()
	}
	if n := ourNode(g, "AggregateSequence", sequenceFields, false, fail); n != nil {
		m.SequenceTable = n.Table()
	}
	if n := ourNode(g, "ConsumerPosition", positionFields, false, fail); n != nil {
		m.PositionTable = n.Table()
	}
	if n := ourNode(g, "ScheduledEvent", scheduledFields, false, fail); n != nil {
		m.ScheduledTable = n.Table()
	}
	// The consumer side is generated when both of its tables are there.
	processed := ourNode(g, "ProcessedEvent", processedFields, false, fail)
	dead := ourNode(g, "DeadLetter", deadLetterFields, false, fail)
	if processed != nil && dead != nil {
		m.ProcessedEventTable, m.DeadLetterTable = processed.Table(), dead.Table()
	}
}

// buildEvents builds the declared events, each wire name once.
func buildEvents(evs []events.Interface, fail func(string, ...any)) []*Event {
	var out []*Event
	byName := map[string]string{}
	for i, ev := range evs {
		if ev == nil || reflect.ValueOf(ev).Kind() == reflect.Pointer && reflect.ValueOf(ev).IsNil() {
			fail("event #%d: declaration is nil", i+1)
			continue
		}
		e := buildEvent(ev, fail)
		if e == nil {
			continue
		}
		if prev, ok := byName[e.Name]; ok && e.Name != "" {
			fail("event %s: wire name %q is already used by event %s", e.GoName, e.Name, prev)
		}
		byName[e.Name] = e.GoName
		out = append(out, e)
	}
	return out
}

// checkGeneratedNames refuses the Go names the generated code would
// declare twice; taken holds ent's own.
func (m *Model) checkGeneratedNames(taken map[string]string, fail func(string, ...any)) {
	// Types the generated code declares besides the payloads.
	taken["OutboxHandlers"] = "the generated OutboxHandlers"
	for _, e := range m.Events {
		for suffix, what := range map[string]string{"Handler": "the handler type", "BatchHandler": "the batch handler type",
			"Delivery": "the batch delivery type"} {
			if _, ok := taken[e.GoName+suffix]; !ok {
				taken[e.GoName+suffix] = what + " of event " + e.GoName
			}
		}
	}
	// Register<Event>Batch of one event is Register<Event> of another.
	for _, e := range m.Events {
		for _, o := range m.Events {
			if o.GoName == e.GoName+"Batch" {
				fail("event %s: its generated method Register%s collides with the batch handler method of event %s; rename one of them",
					o.GoName, o.GoName, e.GoName)
			}
		}
	}
	for _, e := range m.Events {
		for _, v := range e.Versions {
			if owner, ok := taken[v.TypeName]; ok {
				fail("event %s: generated type %s collides with %s", e.GoName, v.TypeName, owner)
				continue
			}
			taken[v.TypeName] = "event " + e.GoName
		}
	}
	m.checkStructNames(taken, fail)
}

// checkStructNames refuses nested structs' names taken. They come after
// every payload type, so that a collision names the nested one whatever
// the order of the events.
func (m *Model) checkStructNames(taken map[string]string, fail func(string, ...any)) {
	for _, e := range m.Events {
		for _, v := range e.Versions {
			for _, st := range v.Structs {
				if owner, ok := taken[st.TypeName]; ok {
					fail("event %s (%q) version %d, field %q: generated type %s collides with %s", e.GoName, e.Name, v.Number, st.Path, st.TypeName, owner)
					continue
				}
				taken[st.TypeName] = fmt.Sprintf("field %q of event %s version %d", st.Path, e.GoName, v.Number)
			}
		}
	}
}

// ourNode finds the ent type name built from one of our schemas and checks
// it has the fields the generated code relies on. A missing optional type
// returns nil quietly.
func ourNode(g *gen.Graph, name string, fields []string, required bool, fail func(string, ...any)) *gen.Type {
	for _, n := range g.Nodes {
		if n.Name != name {
			continue
		}
		have := map[string]bool{}
		for _, f := range n.Fields {
			have[f.Name] = true
		}
		for _, f := range fields {
			if !have[f] {
				fail("ent schema %s: field %q is missing; declare it as type %s struct{ schema.%s } (package github.com/entoutbox/entoutbox/schema)", name, f, name, name)
				return nil
			}
		}
		return n
	}
	if required {
		fail("ent schema: no %s type; add type %s struct{ schema.%s } (package github.com/entoutbox/entoutbox/schema) to your schema package", name, name, name)
	}
	return nil
}

func buildEvent(ev events.Interface, fail func(string, ...any)) *Event {
	t := reflect.TypeOf(ev)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	e := &Event{GoName: t.Name(), Name: ev.Name(), Topic: ev.Topic(), Aggregate: ev.Aggregate(), Comment: ev.Comment(),
		DeclPkg: t.PkgPath(), DeclType: t.Name(), MaxDelay: int64(events.DefaultMaxDelay)}
	if d, ok := ev.(interface{ MaxDelay() time.Duration }); ok {
		e.MaxDelay = int64(max(d.MaxDelay(), 0))
	}
	if !goExport.MatchString(e.GoName) {
		fail("event %q: Go type %q must be a named, exported type", e.Name, t.String())
		return nil
	}
	where := fmt.Sprintf("event %s (%q)", e.GoName, e.Name)
	switch {
	case e.Name == "":
		where = "event " + e.GoName
		fail("%s: Name() is empty", where)
	case !wireName.MatchString(e.Name):
		fail("%s: Name() must be letters, digits, '.', '_' or '-', starting with a letter or digit", where)
	}
	if e.Topic == "" {
		fail("%s: Topic() is empty", where)
	} else if problem := topicProblem(e.Topic); problem != "" {
		fail("%s: Topic() %q %s", where, e.Topic, problem)
	}
	switch {
	case e.Aggregate == "":
		fail("%s: Aggregate() is empty", where)
	case !ident.MatchString(e.Aggregate):
		fail("%s: Aggregate() %q must be an identifier", where, e.Aggregate)
	}
	versions := ev.Versions()
	if len(versions) == 0 {
		fail("%s: Versions() is empty; declare at least events.V(1, ...)", where)
		return e
	}
	for i, v := range versions {
		if v.Number != i+1 {
			fail("%s version %d: versions must be numbered 1, 2, 3... in order; expected version %d here", where, v.Number, i+1)
			continue
		}
		ver := &Version{Number: v.Number, TypeName: fmt.Sprintf("%sV%d", e.GoName, v.Number), Latest: i == len(versions)-1}
		if ver.Latest {
			ver.TypeName = e.GoName
		}
		s := &scope{where: fmt.Sprintf("%s version %d", where, v.Number), event: e.Name, version: ver, fail: fail}
		ver.Fields = s.buildFields("", ver.TypeName, fieldDescriptors(v.Fields))
		e.Versions = append(e.Versions, ver)
	}
	if len(e.Versions) != len(versions) {
		e.Versions = nil
		return e
	}
	planUpcasts(e, ev)
	return e
}

// scope is the version fields are declared in, for errors and the
// generated validation of nested values.
type scope struct {
	where   string // event OrderPaid ("order.paid") version 2
	event   string // wire name
	version *Version
	fail    func(string, ...any)
}

func fieldDescriptors(fs []field.Field) []*field.Descriptor {
	out := make([]*field.Descriptor, len(fs))
	for i, f := range fs {
		if f != nil {
			out[i] = f.Descriptor()
		}
	}
	return out
}

// buildFields builds the fields of a payload (parent "") or of the object
// at path parent, whose struct is typeName.
func (s *scope) buildFields(parent, typeName string, fs []*field.Descriptor) []*Field {
	var (
		out    []*Field
		names  = map[string]bool{}
		goName = map[string]string{}
	)
	for i, d := range fs {
		num := fmt.Sprintf("%s, field #%d", s.where, i+1)
		if parent != "" {
			num = fmt.Sprintf("%s, field %q, field #%d", s.where, parent, i+1)
		}
		if d == nil {
			s.fail("%s: nil field", num)
			continue
		}
		p := d.Name
		if parent != "" {
			p = parent + "." + d.Name
		}
		at := fmt.Sprintf("%s, field %q", s.where, p)
		switch {
		case d.Name == "":
			s.fail("%s: empty name", num)
			continue
		case !ident.MatchString(d.Name):
			s.fail("%s: name must start with a letter and hold only letters, digits and underscores", at)
			continue
		case names[d.Name]:
			s.fail("%s: duplicate field name", at)
			continue
		}
		names[d.Name] = true
		fd := &Field{Descriptor: d, GoName: pascal(d.Name), Path: p}
		if other, ok := goName[fd.GoName]; ok {
			s.fail("%s: Go name %s collides with field %q", at, fd.GoName, other)
			continue
		}
		goName[fd.GoName] = d.Name
		nested := typeName + pascal(d.Name)
		if d.Kind == field.KindList || d.Kind == field.KindMap {
			nested = typeName + pascal(singular(d.Name)) // OrderPlacedLine for "lines"
		}
		if !s.buildNested(fd, nested) {
			continue
		}
		if err := render(fd, s); err != nil {
			s.fail("%s: %v", at, err)
			continue
		}
		out = append(out, fd)
	}
	return out
}

// buildNested builds what f holds: an object's struct, named typeName, and
// fields, or a list's element or map's value (their objects named
// typeName too). It reports false when f cannot be rendered.
func (s *scope) buildNested(f *Field, typeName string) bool {
	d := f.Descriptor
	at := fmt.Sprintf("%s, field %q", s.where, f.Path)
	switch d.Kind {
	case field.KindObject:
		if len(d.Fields) == 0 {
			s.fail("%s: object has no fields", at)
			return false
		}
		f.Struct = &Struct{TypeName: typeName, Path: f.Path}
		s.version.Structs = append(s.version.Structs, f.Struct)
		f.Struct.Fields = s.buildFields(f.Path, typeName, d.Fields)
		f.Fields = f.Struct.Fields
	case field.KindList, field.KindMap:
		what, suffix := "list", "[]"
		if d.Kind == field.KindMap {
			what, suffix = "map", "{}"
		}
		if d.Elem == nil {
			s.fail("%s: %s has no element declaration", at, what)
			return false
		}
		e := &Field{Descriptor: d.Elem, Path: f.Path + suffix, elem: true}
		at = fmt.Sprintf("%s, field %q", s.where, e.Path)
		switch {
		case e.Nillable || e.Default != nil:
			s.fail("%s: an element cannot be Nillable or have a Default (declare them on the %s, or on the fields of an element object)", at, what)
			return false
		case e.Optional && e.Kind == field.KindObject:
			s.fail("%s: an element object cannot be Optional (its fields can)", at)
			return false
		}
		if !s.buildNested(e, typeName) {
			return false
		}
		if err := render(e, s); err != nil {
			s.fail("%s: %v", at, err)
			return false
		}
		f.Elem = e
	}
	return true
}

var (
	pascal   = gen.Funcs["pascal"].(func(string) string)
	singular = gen.Funcs["singular"].(func(string) string)
)

// topicMaxLen is the longest topic every broker takes: watermill-sql's
// offsets table "watermill_offsets_<topic>" must fit PostgreSQL's 63 bytes.
const topicMaxLen = 63 - len("watermill_offsets_")

// topicReserved are the prefixes a broker keeps for itself.
var topicReserved = []struct{ prefix, owner string }{
	{"_INBOX", "NATS reserves for reply subjects"},
	{"amq.", "RabbitMQ reserves"},
	{"__", "Kafka reserves for its internal topics"},
}

// topicProblem says why topic is not a name that every broker the relay
// publishes to takes literally (package broker checks each broker's own rule
// at run time), or returns "".
func topicProblem(topic string) string {
	if !topicChars.MatchString(topic) {
		bad := strings.TrimLeft(topic, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
		r, _ := utf8.DecodeRuneInString(bad)
		return fmt.Sprintf("may only contain letters, digits, '.', '_' and '-', not %q", r)
	}
	if slices.Contains(strings.Split(topic, "."), "") {
		return "has an empty part between dots (a leading, trailing or double dot)"
	}
	if len(topic) > topicMaxLen {
		return fmt.Sprintf("is %d bytes long; at most %d fit every broker (PostgreSQL table names are made from it)", len(topic), topicMaxLen)
	}
	for _, r := range topicReserved {
		if strings.HasPrefix(topic, r.prefix) {
			return fmt.Sprintf("starts with %q, which %s", r.prefix, r.owner)
		}
	}
	return ""
}
