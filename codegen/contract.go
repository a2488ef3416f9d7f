package codegen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"entgo.io/ent/entc/gen"

	"github.com/entoutbox/entoutbox/events"
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
// document.
func contractFiles(m *Model, title string) (map[string][]byte, error) {
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
	b, err := encodeContract(asyncAPI(m, title))
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
	desc := fmt.Sprintf("Payload of version %d of event %q (Go type %s), topic %q, aggregate %s.",
		v.Number, e.Name, v.TypeName, e.Topic, e.Aggregate)
	if e.Comment != "" {
		desc = e.Comment + "\n\n" + desc
	}
	s["description"] = desc
	return s
}

// objectSchema is the schema of a JSON object holding fields, the payload
// or a nested object. Keys it does not declare are refused: every version
// lists all of its fields, at every depth.
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
	return jsonObject{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// requiredKey tells whether the key must be in every payload. An optional
// field is left out when zero (omitzero); one with a default may be
// absent, as in a payload of an older version, since the consumer fills
// the default in.
func requiredKey(d *field.Descriptor) bool { return !d.Optional && d.Default == nil }

// zeroTime and nilUUID are what the zero values encode to; a required time
// or UUID field refuses them, as Validate does.
const (
	zeroTime = "0001-01-01T00:00:00Z"
	nilUUID  = "00000000-0000-0000-0000-000000000000"
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
	if !d.Optional && d.Default == nil {
		switch d.Kind {
		case field.KindString, field.KindEnum:
			s["minLength"] = 1
		case field.KindTime:
			s["not"] = jsonObject{"const": zeroTime}
		case field.KindUUID:
			s["not"] = jsonObject{"const": nilUUID}
		}
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
	if d.Min != nil {
		s["minimum"] = *d.Min
	}
	if d.Max != nil {
		s["maximum"] = *d.Max
	}
	if d.Default != nil {
		s["default"] = d.Default
	}
	if d.Comment != "" {
		s["description"] = d.Comment
	}
	if d.Nillable {
		// A nil pointer is left out, and null decodes to one.
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

// kindSchema is the type of a kind's JSON values.
func kindSchema(k field.Kind) jsonObject {
	switch k {
	case field.KindString, field.KindEnum:
		return jsonObject{"type": "string"}
	case field.KindBool:
		return jsonObject{"type": "boolean"}
	case field.KindInt, field.KindInt64:
		return jsonObject{"type": "integer", "format": "int64"}
	case field.KindInt32:
		return jsonObject{"type": "integer", "format": "int32", "minimum": -1 << 31, "maximum": 1<<31 - 1}
	case field.KindFloat64:
		return jsonObject{"type": "number", "format": "double"}
	case field.KindTime:
		return jsonObject{"type": "string", "format": "date-time"}
	case field.KindUUID:
		return jsonObject{"type": "string", "format": "uuid"}
	case field.KindBytes:
		return jsonObject{"type": "string", "contentEncoding": "base64"}
	case field.KindJSON:
		return jsonObject{"description": "any JSON value"}
	case field.KindStrings:
		return listSchema(jsonObject{"type": "string"})
	case field.KindInts, field.KindInt64s:
		return listSchema(jsonObject{"type": "integer", "format": "int64"})
	case field.KindFloat64s:
		return listSchema(jsonObject{"type": "number", "format": "double"})
	}
	return jsonObject{}
}

func listSchema(items jsonObject) jsonObject { return jsonObject{"type": "array", "items": items} }

// The CloudEvents attributes the relay can add (relay.CloudEvents), in the
// binary content mode's ce_ headers.
var cloudEventHeaders = []string{"ce_id", "ce_source", "ce_specversion", "ce_type", "ce_time",
	"ce_datacontenttype", "ce_dataschema"}

// headersSchema is the schema of the message metadata of a version: the
// outbox keys the relay always sets, the CloudEvents attributes when the
// relay adds them, and the emitter's own headers, all strings.
func headersSchema(e *Event, v *Version) jsonObject {
	str := func(desc string) jsonObject { return jsonObject{"type": "string", "description": desc} }
	props := jsonObject{
		events.MetaEventName:     jsonObject{"type": "string", "const": e.Name, "description": "the event's wire name"},
		events.MetaEventVersion:  jsonObject{"type": "string", "const": strconv.Itoa(v.Number), "description": "the payload's version"},
		events.MetaAggregateType: jsonObject{"type": "string", "const": e.Aggregate, "description": "the aggregate type; events of one aggregate arrive in order"},
		events.MetaAggregateID:   jsonObject{"type": "string", "minLength": 1, "maxLength": 255, "description": "the aggregate id"},
		events.MetaCreatedAt:     jsonObject{"type": "string", "format": "date-time", "description": "when the event was written (RFC 3339, UTC)"},
	}
	if v.ReadableFrom > 0 && v.ReadableFrom < v.Number {
		props[events.MetaReadableFrom] = jsonObject{"type": "string", "const": strconv.Itoa(v.ReadableFrom),
			"description": "the oldest version whose consumers can read this one (rolling deploys)"}
	}
	ce := map[string]jsonObject{
		"ce_id":              str("CloudEvents id: the event id"),
		"ce_source":          {"type": "string", "format": "uri-reference", "description": "CloudEvents source"},
		"ce_specversion":     {"type": "string", "const": "1.0", "description": "CloudEvents spec version"},
		"ce_type":            {"type": "string", "const": fmt.Sprintf("%s.v%d", e.Name, v.Number), "description": "CloudEvents type: wire name and version"},
		"ce_time":            {"type": "string", "format": "date-time", "description": "CloudEvents time: when the event was written"},
		"ce_datacontenttype": {"type": "string", "const": "application/json", "description": "CloudEvents datacontenttype"},
		"ce_dataschema":      {"type": "string", "format": "uri", "description": "CloudEvents dataschema: this version's JSON Schema, " + SchemaPath(e.Name, v.Number) + " under the relay's base URI"},
	}
	for _, k := range cloudEventHeaders {
		props[k] = ce[k]
	}
	required := []string{events.MetaAggregateID, events.MetaAggregateType, events.MetaCreatedAt, events.MetaEventName, events.MetaEventVersion}
	return jsonObject{
		"type":        "object",
		"description": "Message metadata. The ce_ attributes are there when the relay adds CloudEvents attributes; the emitter's headers (events.WithHeader) are strings too. The message UUID is the event id.",
		"properties":  props, "required": required,
		"additionalProperties": jsonObject{"type": "string"},
	}
}

// messageKey names a version's message in the AsyncAPI document.
func messageKey(e *Event, v *Version) string { return fmt.Sprintf("%s.v%d", e.Name, v.Number) }

// asyncAPI is the AsyncAPI 3.0 document of m: a channel per topic, a
// message per event version, and per event a send operation (every event
// has its Emit method) and, when the consumer side is generated, a receive
// operation (every event has its Register method). Both list every version:
// the relay publishes rows written before a deploy, and handlers take every
// declared version.
func asyncAPI(m *Model, title string) jsonObject {
	channels, operations := jsonObject{}, jsonObject{}
	messages, schemas := jsonObject{}, jsonObject{}
	for _, e := range m.Events {
		ch, ok := channels[e.Topic].(jsonObject)
		if !ok {
			ch = jsonObject{"address": e.Topic, "messages": jsonObject{},
				"description": fmt.Sprintf("Topic %q (the relay's topic prefix, if any, goes before it).", e.Topic)}
			channels[e.Topic] = ch
		}
		var refs []jsonObject
		for _, v := range e.Versions {
			key := messageKey(e, v)
			ch["messages"].(jsonObject)[key] = jsonObject{"$ref": "#/components/messages/" + key}
			refs = append(refs, jsonObject{"$ref": "#/channels/" + e.Topic + "/messages/" + key})
			schemas[key] = payloadSchema(e, v)
			msg := jsonObject{
				"name":        key,
				"title":       fmt.Sprintf("%s v%d", e.GoName, v.Number),
				"contentType": "application/json",
				"headers":     headersSchema(e, v),
				"payload":     jsonObject{"$ref": "#/components/schemas/" + key},
			}
			if e.Comment != "" {
				msg["summary"] = e.Comment
			}
			messages[key] = msg
		}
		channel := jsonObject{"$ref": "#/channels/" + e.Topic}
		operations["send"+e.GoName] = jsonObject{"action": "send", "channel": channel, "messages": refs,
			"summary": fmt.Sprintf("Emit%s writes %q to the outbox; the relay publishes it.", e.GoName, e.Name)}
		if m.HasConsumers() {
			operations["receive"+e.GoName] = jsonObject{"action": "receive", "channel": channel, "messages": refs,
				"summary": fmt.Sprintf("Handlers registered with Register%s (or On%s) receive %q, older versions upcast.", e.GoName, e.GoName, e.Name)}
		}
	}
	doc := jsonObject{
		"asyncapi":           "3.0.0",
		"defaultContentType": "application/json",
		"channels":           channels,
		"operations":         operations,
		"components":         jsonObject{"messages": messages, "schemas": schemas},
	}
	// The version changes whenever the contract does.
	b, _ := json.Marshal(doc)
	sum := sha256.Sum256(b)
	doc["info"] = jsonObject{
		"title":   title,
		"version": hex.EncodeToString(sum[:6]),
		"description": "Events of " + title + ", generated by entoutbox from the event declarations. " +
			"info.version is a digest of this document: it changes whenever an event, version or field does.",
	}
	return doc
}

// writeContracts writes the contract files of m under the target
// directory's ContractDir, rewriting only those that changed and removing
// the schemas of versions no longer declared.
func writeContracts(g *gen.Graph, m *Model) error {
	files, err := contractFiles(m, g.Config.Package)
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
