package codegen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"entgo.io/ent/entc/gen"

	"github.com/entoutbox/entoutbox/events/field"
)

// The contract files go next to the generated code, under ContractDir of
// the ent package: a JSON Schema per event version and one AsyncAPI
// document for the whole package.
const (
	// ContractDir is the directory, inside the ent package, of the
	// contract files.
	ContractDir = "entoutbox"
	// AsyncAPIFile is the AsyncAPI 3.0 document, relative to ContractDir.
	AsyncAPIFile = "asyncapi.json"
	// JSONSchemaDialect is the dialect of every payload schema.
	JSONSchemaDialect = "https://json-schema.org/draft/2020-12/schema"
)

// SchemaPath is the path of the JSON Schema of an event version's payload,
// relative to ContractDir: schemas/<wire name>.v<version>.json. The relay's
// CloudEvents dataschema appends it to a base URI.
func SchemaPath(name string, version int) string {
	return fmt.Sprintf("schemas/%s.v%d.json", name, version)
}

// jsonObject is a JSON object; encoding/json writes its keys sorted, so
// every contract file comes out the same for the same declarations.
type jsonObject = map[string]any

// contractFiles renders the contract of m: file path (relative to
// ContractDir) to content. title names the service in the AsyncAPI
// document, which doc describes further.
func contractFiles(m *Model, title string, doc *asyncAPIConfig) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, e := range m.Events {
		for _, v := range e.Versions {
			s := payloadSchema(e, v)
			s["$schema"] = JSONSchemaDialect
			b, err := encodeContract(s)
			if err != nil {
				return nil, err
			}
			files[SchemaPath(e.Name, v.Number)] = b
		}
	}
	b, err := encodeContract(asyncAPI(m, title, doc))
	if err != nil {
		return nil, err
	}
	files[AsyncAPIFile] = b
	return files, nil
}

func encodeContract(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("entoutbox: encoding a contract file: %w", err)
	}
	return buf.Bytes(), nil
}

// payloadSchema is the JSON Schema of a version's payload as the generated
// code writes and accepts it: Validate's rules, in JSON Schema words.
func payloadSchema(e *Event, v *Version) jsonObject {
	ds := make([]*field.Descriptor, len(v.Fields))
	for i, f := range v.Fields {
		ds[i] = f.Descriptor
	}
	s := objectSchema(ds)
	s["title"] = fmt.Sprintf("%s v%d", e.Name, v.Number)
	desc := fmt.Sprintf("Payload of version %d of event %q (Go type %s), topic %q, aggregate %s. "+
		"Objects, at every depth, may hold keys this version does not declare (later versions add them): readers ignore them.",
		v.Number, e.Name, v.TypeName, e.Topic, e.Aggregate)
	if e.Comment != "" {
		desc = e.Comment + "\n\n" + desc
	}
	s["description"] = desc
	return s
}

// objectSchema is the schema of a JSON object holding fields, the payload
// or a nested object. It is open: a key it does not declare is allowed, at
// every depth, and the generated handlers ignore it, so that a consumer of
// a version reads the payloads of later versions that the lock records as
// forward compatible (they add fields), whichever validator it uses.
func objectSchema(fields []*field.Descriptor) jsonObject {
	props := jsonObject{}
	required := []string{}
	for _, d := range fields {
		props[d.Name] = fieldSchema(d)
		if requiredKey(d) {
			required = append(required, d.Name)
		}
	}
	slices.Sort(required)
	return jsonObject{"type": "object", "properties": props, "required": required}
}

// requiredKey tells whether the key must be in every payload. An optional
// field is left out when zero (omitzero); one with a default may be
// absent, as in a payload of an older version, since the consumer fills
// the default in.
func requiredKey(d *field.Descriptor) bool { return !d.Optional && d.Default == nil }

// emptyRefused tells whether a string or enum field refuses "": when it
// is required, and when Emit writes its default for "" (a field with a
// default that is not a pointer), so that "" never stands for the default.
func emptyRefused(d *field.Descriptor) bool {
	return !d.Nillable && (!d.Optional || d.Default != nil)
}

// zeroTimePattern and nilUUID are the zero values, which a required time or
// UUID field refuses, as Validate does: the zero time as Go writes it and in
// the other spellings of UTC. (The same instant with another offset,
// 0001-01-01T01:00:00+01:00, passes the schema, which cannot compute
// instants; Validate refuses it in a payload upcast from an older version.)
const (
	zeroTimePattern = `^0001-01-01T00:00:00(\.0+)?(Z|[+-]00:00)$`
	nilUUID         = "00000000-0000-0000-0000-000000000000"
)

// The patterns of the values whose format a validator may take as a mere
// annotation (JSON Schema's default): they assert what the generated code
// writes and reads. A time is RFC 3339 as Go parses it (an upper-case T
// and Z, no leap second), a UUID has its dashes (no braces, no urn:), bytes
// are padded standard base64 without line breaks.
const (
	timePattern   = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`
	uuidPattern   = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	base64Pattern = `^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`
)

// fieldSchema is the schema of one field's value, or of every element of
// a list or value of a map (d is then Elem: neither optional nor
// defaulted, so held to what a required field is, as Validate holds it).
// Nested kinds recurse: an object's fields, a list's element, a map's
// value.
func fieldSchema(d *field.Descriptor) jsonObject {
	var s jsonObject
	switch d.Kind {
	case field.KindObject:
		s = objectSchema(d.Fields)
	case field.KindList:
		s = listSchema(elemSchema(d.Elem))
	case field.KindMap:
		s = jsonObject{"type": "object", "additionalProperties": elemSchema(d.Elem)}
	default:
		s = kindSchema(d.Kind)
	}
	// What Validate asks of a field it requires (a default or Optional lets
	// the zero value through).
	if requiredKey(d) {
		switch d.Kind {
		case field.KindTime:
			s["not"] = jsonObject{"pattern": zeroTimePattern}
		case field.KindUUID:
			s["not"] = jsonObject{"const": nilUUID}
		}
	}
	if (d.Kind == field.KindString || d.Kind == field.KindEnum) && emptyRefused(d) {
		s["minLength"] = 1
	}
	if d.Kind == field.KindEnum {
		s["enum"] = slices.Clone(d.Enum)
	}
	if d.MaxLen > 0 {
		// JSON Schema counts characters, Validate bytes: the same for ASCII.
		s["maxLength"] = d.MaxLen
	}
	if d.Positive {
		s["exclusiveMinimum"] = 0
	}
	// The declared bounds replace the kind's where they are tighter.
	if d.Min != nil && (s["minimum"] == nil || *d.Min > asFloat(s["minimum"])) {
		s["minimum"] = *d.Min
	}
	if d.Max != nil && (s["maximum"] == nil || *d.Max < asFloat(s["maximum"])) {
		s["maximum"] = *d.Max
	}
	if d.Default != nil {
		s["default"] = d.Default
	}
	if d.Comment != "" {
		s["description"] = d.Comment
	}
	if d.Nillable && d.Default == nil {
		// A nil pointer is left out, and null decodes to one. With a
		// default, Emit writes the default for nil, and null is refused as
		// it would not be read as the default elsewhere.
		if t, ok := s["type"].(string); ok {
			s["type"] = []string{t, "null"}
		}
		if enum, ok := s["enum"].([]string); ok {
			s["enum"] = append(anySlice(enum), nil)
		}
	}
	return s
}

// elemSchema is fieldSchema of a list's element or a map's value; Build
// refused a missing one.
func elemSchema(d *field.Descriptor) jsonObject {
	if d == nil {
		return jsonObject{}
	}
	return fieldSchema(d)
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// kindSchema is the type of a kind's JSON values. Numbers are bounded by
// what their Go type holds, so that a value the schema takes always
// decodes.
func kindSchema(k field.Kind) jsonObject {
	switch k {
	case field.KindString, field.KindEnum:
		return jsonObject{"type": "string"}
	case field.KindBool:
		return jsonObject{"type": "boolean"}
	case field.KindInt, field.KindInt64:
		return int64Schema()
	case field.KindInt32:
		return jsonObject{"type": "integer", "format": "int32", "minimum": math.MinInt32, "maximum": math.MaxInt32}
	case field.KindFloat64:
		return float64Schema()
	case field.KindTime:
		return jsonObject{"type": "string", "format": "date-time", "pattern": timePattern}
	case field.KindUUID:
		return jsonObject{"type": "string", "format": "uuid", "pattern": uuidPattern}
	case field.KindBytes:
		return jsonObject{"type": "string", "contentEncoding": "base64", "pattern": base64Pattern}
	case field.KindJSON:
		return jsonObject{"description": "any JSON value"}
	case field.KindStrings:
		return listSchema(jsonObject{"type": "string"})
	case field.KindInts, field.KindInt64s:
		return listSchema(int64Schema())
	case field.KindFloat64s:
		return listSchema(float64Schema())
	}
	return jsonObject{}
}

func int64Schema() jsonObject {
	return jsonObject{"type": "integer", "format": "int64", "minimum": int64(math.MinInt64), "maximum": int64(math.MaxInt64)}
}

func float64Schema() jsonObject {
	return jsonObject{"type": "number", "format": "double", "minimum": -math.MaxFloat64, "maximum": math.MaxFloat64}
}

// asFloat is a bound of kindSchema or a declared one, as a float64.
func asFloat(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

func listSchema(items jsonObject) jsonObject { return jsonObject{"type": "array", "items": items} }

// writeContracts writes the contract files of m under the target
// directory's ContractDir, rewriting only those that changed and removing
// the schemas of versions no longer declared.
func writeContracts(g *gen.Graph, m *Model, doc *asyncAPIConfig) error {
	files, err := contractFiles(m, g.Config.Package, doc)
	if err != nil {
		return err
	}
	dir := filepath.Join(g.Config.Target, ContractDir)
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o755); err != nil {
		return fmt.Errorf("entoutbox: writing the contract: %w", err)
	}
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, content) {
			continue
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return fmt.Errorf("entoutbox: writing the contract: %w", err)
		}
	}
	old, err := os.ReadDir(filepath.Join(dir, "schemas"))
	if err != nil {
		return fmt.Errorf("entoutbox: writing the contract: %w", err)
	}
	for _, f := range old {
		if _, ok := files["schemas/"+f.Name()]; !ok && !f.IsDir() && strings.HasSuffix(f.Name(), ".json") {
			if err := os.Remove(filepath.Join(dir, "schemas", f.Name())); err != nil {
				return fmt.Errorf("entoutbox: removing the schema of an undeclared version: %w", err)
			}
		}
	}
	return nil
}
