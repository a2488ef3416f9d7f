// Package schematest holds payloads to the published JSON Schemas with
// validators that are not the code under test: santhosh-tekuri/jsonschema
// (compiled here, apart from the consumer's own use of it) and, when node
// has it installed, ajv 8 with its 2020-12 dialect and ajv-formats, as a
// team outside Go validates. It also makes payloads from a schema: valid
// ones, and one change at a time at every field, of every kind. Only tests
// import it.
package schematest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema is a published schema file: its document, for making payloads,
// and its compilation, for validating them.
type Schema struct {
	Path     string
	Doc      map[string]any // numbers are json.Number
	compiled *jsonschema.Schema
}

// Load reads and compiles the schema file at path, with format assertion
// on (as ajv-formats asserts) and nothing loaded from the network.
func Load(t testing.TB, path string) *Schema {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("schematest: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("schematest: %s: %v", path, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(offline{})
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("schematest: %v", err)
	}
	url := "file://" + filepath.ToSlash(abs)
	if err := c.AddResource(url, doc); err != nil {
		t.Fatalf("schematest: %s: %v", path, err)
	}
	compiled, err := c.Compile(url)
	if err != nil {
		t.Fatalf("schematest: compiling %s: %v", path, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		t.Fatalf("schematest: %s is not a JSON object", path)
	}
	return &Schema{Path: path, Doc: m, compiled: compiled}
}

type offline struct{}

func (offline) Load(string) (any, error) { return nil, os.ErrNotExist }

// Valid tells whether the schema accepts payload, parsed as
// jsonschema.UnmarshalJSON parses it (numbers exact, the last of a key
// given twice).
func (s *Schema) Valid(payload []byte) bool {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return false
	}
	return s.compiled.Validate(doc) == nil
}

// Compact is payload without insignificant space, for messages.
func Compact(payload []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, payload); err != nil {
		return string(payload)
	}
	return buf.String()
}
