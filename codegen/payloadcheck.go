package codegen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// payloadChecks renders, for every event version of m, the check of its
// payload as Go: a function per node of the JSON Schema go generate
// publishes for the version, read back from the very bytes written to the
// contract, so that the check says exactly what the file says. A keyword
// the generator does not know fails generation rather than pass unchecked.
func payloadChecks(m *Model) (string, error) {
	g := newCheckGen()
	for _, e := range m.Events {
		for _, v := range e.Versions {
			g.names[payloadCheckName(e.GoName, v.Number)] = true
		}
	}
	for _, e := range m.Events {
		for _, v := range e.Versions {
			s := payloadSchema(e, v)
			s["$schema"] = JSONSchemaDialect
			doc, err := publishedDocument(s)
			if err != nil {
				return "", err
			}
			where := fmt.Sprintf("%s v%d", e.Name, v.Number)
			root := payloadCheckName(e.GoName, v.Number)
			delete(g.names, root) // reserved from the other versions' nodes, for this one
			written, err := g.node(root, where, doc)
			if err != nil {
				return "", fmt.Errorf("entoutbox: the payload check of %s: %w", where, err)
			}
			if written != root { // the same schema as an earlier node's: its check, under this name
				fmt.Fprintf(&g.vars, "// %s checks %s: its schema is %s's.\nvar %s = %s\n\n", root, where, written, root, written)
			}
		}
	}
	return g.vars.String() + g.funcs.String(), nil
}

// payloadCheckName is the generated check of a version's payload.
func payloadCheckName(goName string, version int) string {
	return fmt.Sprintf("outboxCheck%sV%d", goName, version)
}

// publishedDocument is s as a reader of its contract file reads it.
func publishedDocument(s jsonObject) (map[string]any, error) {
	b, err := encodeContract(s)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("entoutbox: reading a payload schema back: %w", err)
	}
	return doc, nil
}

type checkGen struct {
	funcs, vars bytes.Buffer
	names       map[string]bool   // function and variable names taken
	patterns    map[string]string // pattern → its variable
	bounds      map[string]string // bound as written → its variable
	// checks is the function written for each schema, by its checked
	// keywords: a node two events or versions share is checked by one.
	checks map[string]string
}

func newCheckGen() *checkGen {
	return &checkGen{names: map[string]bool{}, patterns: map[string]string{}, bounds: map[string]string{},
		checks: map[string]string{}}
}

// checkKeywords are the keywords a generated check knows; annotations
// (true) check nothing.
var checkKeywords = map[string]bool{
	"$schema": true, "title": true, "description": true, "default": true, "examples": true, "contentEncoding": true,
	"type": false, "properties": false, "required": false, "additionalProperties": false, "items": false,
	"enum": false, "const": false, "not": false, "pattern": false, "format": false, "minLength": false,
	"maxLength": false, "minimum": false, "maximum": false, "exclusiveMinimum": false, "exclusiveMaximum": false,
}

// node writes the check of schema s at where, named name when it checks
// anything, and returns the Go expression of the check ("nil": any value).
func (g *checkGen) node(name, where string, s map[string]any) (string, error) {
	trivial := true
	for k := range s {
		annotation, known := checkKeywords[k]
		if !known {
			return "", fmt.Errorf("%s: the generated check does not know keyword %q", where, k)
		}
		trivial = trivial && annotation
	}
	if trivial {
		return "nil", nil
	}
	key := checkedKeywords(s)
	if written, ok := g.checks[key]; ok {
		return written, nil
	}
	name = g.unique(name)
	n, err := g.readNode(name, where, s)
	if err != nil {
		return "", err
	}
	g.writeNode(name, where, n)
	g.checks[key] = name
	return name, nil
}

// checkedKeywords is s without its annotations, as canonical JSON (sorted
// keys): two nodes with the same are checked alike.
func checkedKeywords(s map[string]any) string {
	checked := map[string]any{}
	for k, v := range s {
		if !checkKeywords[k] {
			checked[k] = v
		}
	}
	b, _ := json.Marshal(checked) // values read from JSON: they marshal
	return string(b)
}

// checkNode is a schema node as the generated function checks it.
type checkNode struct {
	types                 map[string]bool // nil: every type
	values                []any           // enum or const: the values allowed, if set
	hasValues             bool
	not                   string
	str                   []string // the conditions on a string
	integer               bool
	bounds                string // the InBounds arguments, "" for none
	items                 string
	object                bool
	required, props, addl string
	closed                bool
}

func (g *checkGen) readNode(name, where string, s map[string]any) (*checkNode, error) {
	n := &checkNode{items: "nil", required: "nil", props: "nil", addl: "nil"}
	if err := n.readTypes(s["type"]); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := n.readValues(s); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if sub, ok := s["not"]; ok {
		var err error
		if n.not, err = g.sub(name+"Not", where+" (not)", sub); err != nil {
			return nil, err
		}
	}
	if err := g.readString(n, where, s); err != nil {
		return nil, err
	}
	if err := g.readNumber(n, s); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if sub, ok := s["items"]; ok {
		var err error
		if n.items, err = g.sub(name+"Item", where+"[]", sub); err != nil {
			return nil, err
		}
	}
	return n, g.readObject(n, name, where, s)
}

// sub writes the check of a subschema, which must be an object.
func (g *checkGen) sub(name, where string, v any) (string, error) {
	s, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("%s: the generated check takes object subschemas only, not %v", where, v)
	}
	return g.node(name, where, s)
}

func (n *checkNode) readTypes(v any) error {
	var types []any
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		types = []any{t}
	case []any:
		types = t
	default:
		return fmt.Errorf("type %v is neither a string nor a list", v)
	}
	n.types = map[string]bool{}
	for _, t := range types {
		s, _ := t.(string)
		switch s {
		case "null", "boolean", "integer", "number", "string", "array", "object":
			n.types[s] = true
		default:
			return fmt.Errorf("type %v is not a JSON type", t)
		}
	}
	n.integer = n.types["integer"] && !n.types["number"]
	return nil
}

func (n *checkNode) readValues(s map[string]any) error {
	if enum, ok := s["enum"]; ok {
		values, ok := enum.([]any)
		if !ok {
			return fmt.Errorf("enum %v is not a list", enum)
		}
		n.values, n.hasValues = values, true
	}
	if c, ok := s["const"]; ok {
		if n.hasValues {
			return fmt.Errorf("both enum and const")
		}
		n.values, n.hasValues = []any{c}, true
	}
	for _, v := range n.values {
		switch v.(type) {
		case nil, bool, string:
		default:
			return fmt.Errorf("the generated check takes enum and const values that are strings, booleans or null, not %v", v)
		}
	}
	return nil
}

// readString reads the string keywords into the conditions of the string
// case. Format date-time is checked beside the time pattern, which holds
// all but whether the date exists; format uuid as itself. The number
// formats (int32, int64, double) assert no more than type and bounds say.
func (g *checkGen) readString(n *checkNode, where string, s map[string]any) error {
	minimum, maximum := -1, -1
	for k, p := range map[string]*int{"minLength": &minimum, "maxLength": &maximum} {
		if v, ok := s[k]; ok {
			i, err := strconv.Atoi(fmt.Sprint(v))
			if err != nil || i < 0 {
				return fmt.Errorf("%s: %s %v is not a count", where, k, v)
			}
			*p = i
		}
	}
	if minimum > 0 || maximum >= 0 {
		n.str = append(n.str, fmt.Sprintf("w.Length(x, %d, %d)", max(minimum, 0), maximum))
	}
	pattern, hasPattern := s["pattern"].(string)
	if hasPattern {
		n.str = append(n.str, g.pattern(pattern)+".MatchString(x)")
	} else if _, ok := s["pattern"]; ok {
		return fmt.Errorf("%s: pattern %v is not a string", where, s["pattern"])
	}
	switch f := s["format"]; f {
	case nil, "int32", "int64", "double":
	case "date-time":
		if pattern != timePattern {
			return fmt.Errorf("%s: format date-time without the time pattern", where)
		}
		n.str = append(n.str, "w.DateTime(x)")
	case "uuid":
		n.str = append(n.str, "w.UUID(x)")
	default:
		return fmt.Errorf("%s: the generated check does not know format %v", where, f)
	}
	return nil
}

// readNumber reads the bounds, exact as written.
func (g *checkGen) readNumber(n *checkNode, s map[string]any) error {
	var args []string
	found := false
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		v, ok := s[k]
		if !ok {
			args = append(args, "nil")
			continue
		}
		num, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s %v is not a number", k, v)
		}
		args, found = append(args, g.bound(string(num))), true
	}
	if found {
		n.bounds = strings.Join(args, ", ")
	}
	return nil
}

func (g *checkGen) readObject(n *checkNode, name, where string, s map[string]any) error {
	if req, ok := s["required"]; ok {
		keys, ok := req.([]any)
		if !ok {
			return fmt.Errorf("%s: required %v is not a list", where, req)
		}
		if len(keys) > 0 {
			n.required = g.unique(name + "Required")
			fmt.Fprintf(&g.vars, "var %s = []string{%s}\n\n", n.required, quoteAll(keys))
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		var lines []string
		for _, k := range slices.Sorted(maps.Keys(props)) {
			check, err := g.sub(name+goIdent(k), where+"."+k, props[k])
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("\t%s: %s,\n", strconv.Quote(k), check))
		}
		n.props = g.unique(name + "Props")
		fmt.Fprintf(&g.vars, "var %s = map[string]consumer.PayloadCheck{\n%s}\n\n", n.props, strings.Join(lines, ""))
	} else if p, ok := s["properties"]; ok {
		return fmt.Errorf("%s: properties %v is not an object", where, p)
	}
	switch a := s["additionalProperties"].(type) {
	case nil, bool:
		n.closed = a == false
	default:
		var err error
		if n.addl, err = g.sub(name+"Value", where+"[]", a); err != nil {
			return err
		}
	}
	n.object = n.required != "nil" || n.props != "nil" || n.addl != "nil" || n.closed
	return nil
}

// writeNode writes the function of a node: a case per type it allows.
func (g *checkGen) writeNode(name, where string, n *checkNode) {
	var cases []string
	usesX := false
	allowed := func(t string) bool { return n.types == nil || n.types[t] }
	if allowed("null") {
		cases = append(cases, "\tcase nil:\n\t\treturn v, "+n.valueCond("null", "")+"\n")
	}
	if allowed("boolean") {
		cond := n.valueCond("boolean", "x")
		usesX = usesX || cond != "true" && cond != "false"
		cases = append(cases, "\tcase bool:\n\t\treturn v, "+cond+"\n")
	}
	if allowed("integer") || allowed("number") {
		cases = append(cases, n.numberCase())
		usesX = usesX || n.integer || n.bounds != "" || n.hasValues
	}
	if allowed("string") {
		c := n.stringCase()
		cases = append(cases, c)
		usesX = usesX || strings.Contains(c, "x")
	}
	if allowed("array") {
		cases = append(cases, fmt.Sprintf("\tcase []any:\n\t\treturn v, %sw.Array(x, %s)\n", andPrefix(n.valueCond("array", "")), n.items))
		usesX = true
	}
	if allowed("object") {
		cases = append(cases, n.objectCase())
		usesX = usesX || n.object
	}
	fmt.Fprintf(&g.funcs, "// %s checks %s as its published JSON Schema says.\n", name, where)
	fmt.Fprintf(&g.funcs, "func %s(w *consumer.PayloadWalk, v any) (any, bool) {\n", name)
	if n.not != "" {
		fmt.Fprintf(&g.funcs, "\tif _, ok := %s(&consumer.PayloadWalk{}, v); ok {\n\t\treturn v, false\n\t}\n", n.not)
	}
	if usesX {
		g.funcs.WriteString("\tswitch x := v.(type) {\n")
	} else {
		g.funcs.WriteString("\tswitch v.(type) {\n")
	}
	g.funcs.WriteString(strings.Join(cases, ""))
	g.funcs.WriteString("\t}\n\treturn v, false\n}\n\n")
}

// valueCond is the condition enum or const set on a value of JSON type t,
// x in Go ("" when t has no value to compare).
func (n *checkNode) valueCond(t, x string) string {
	if !n.hasValues {
		return "true"
	}
	var conds []string
	for _, v := range n.values {
		switch v := v.(type) {
		case nil:
			if t == "null" {
				return "true"
			}
		case bool:
			if t == "boolean" {
				conds = append(conds, fmt.Sprintf("%s == %t", x, v))
			}
		case string:
			if t == "string" {
				conds = append(conds, fmt.Sprintf("%s == %s", x, strconv.Quote(v)))
			}
		}
	}
	if len(conds) == 0 {
		return "false"
	}
	return strings.Join(conds, " || ")
}

func (n *checkNode) numberCase() string {
	var b strings.Builder
	b.WriteString("\tcase json.Number:\n")
	if n.hasValues { // numbers are never among the values (readValues)
		b.WriteString("\t\treturn v, false\n")
		return b.String()
	}
	ret := "v"
	if n.integer {
		b.WriteString("\t\tn, ok := w.Integer(x)\n\t\tif !ok {\n\t\t\treturn v, false\n\t\t}\n")
		ret = "n"
	}
	if n.bounds != "" {
		fmt.Fprintf(&b, "\t\treturn %s, w.InBounds(x, %s)\n", ret, n.bounds)
	} else {
		fmt.Fprintf(&b, "\t\treturn %s, true\n", ret)
	}
	return b.String()
}

func (n *checkNode) stringCase() string {
	conds := slices.Clone(n.str)
	if c := n.valueCond("string", "x"); c != "true" {
		conds = append([]string{"(" + c + ")"}, conds...)
	}
	if len(conds) == 0 {
		return "\tcase string:\n\t\treturn v, true\n"
	}
	return "\tcase string:\n\t\treturn v, " + strings.Join(conds, " &&\n\t\t\t") + "\n"
}

func (n *checkNode) objectCase() string {
	if !n.object {
		if n.valueCond("object", "") == "false" {
			return "\tcase map[string]any:\n\t\treturn v, false\n"
		}
		return "\tcase map[string]any:\n\t\treturn w.Any(v)\n"
	}
	return fmt.Sprintf("\tcase map[string]any:\n\t\treturn v, %sw.Required(x, %s) && w.Object(x, %s, %s, %t)\n",
		andPrefix(n.valueCond("object", "")), n.required, n.props, n.addl, n.closed)
}

// andPrefix is cond followed by &&, or nothing for "true".
func andPrefix(cond string) string {
	if cond == "true" {
		return ""
	}
	return cond + " && "
}

// unique returns name, or name with a number, not taken yet.
func (g *checkGen) unique(name string) string {
	u := name
	for i := 2; g.names[u]; i++ {
		u = name + strconv.Itoa(i)
	}
	g.names[u] = true
	return u
}

func (g *checkGen) pattern(expr string) string {
	if v, ok := g.patterns[expr]; ok {
		return v
	}
	v := g.unique(fmt.Sprintf("outboxPattern%d", len(g.patterns)+1))
	g.patterns[expr] = v
	fmt.Fprintf(&g.vars, "var %s = consumer.NewPayloadPattern(%s)\n\n", v, strconv.Quote(expr))
	return v
}

func (g *checkGen) bound(num string) string {
	if v, ok := g.bounds[num]; ok {
		return v
	}
	v := g.unique(fmt.Sprintf("outboxBound%d", len(g.bounds)+1))
	g.bounds[num] = v
	fmt.Fprintf(&g.vars, "var %s = consumer.NewPayloadBound(%s)\n\n", v, strconv.Quote(num))
	return v
}

func quoteAll(vs []any) string {
	var out []string
	for _, v := range vs {
		out = append(out, strconv.Quote(fmt.Sprint(v)))
	}
	return strings.Join(out, ", ")
}

// goIdent turns a JSON key into part of a Go name: amount_cents into
// AmountCents.
func goIdent(key string) string {
	var b strings.Builder
	up := true
	for _, r := range key {
		switch {
		case r == '_' || r == '-' || r == '.' || !unicode.IsLetter(r) && !unicode.IsDigit(r):
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(r))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "Field"
	}
	return b.String()
}
