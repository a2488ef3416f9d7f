package codegen_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/relay"
)

// asyncAPISchema is the official AsyncAPI 3.0.0 JSON Schema (draft-07), as
// the AsyncAPI Initiative publishes it; see testdata/asyncapi-3.0.0.README.
const asyncAPISchema = "testdata/asyncapi-3.0.0.json"

// The committed contracts of the repository's own ent packages.
var committedContracts = []string{"../internal/testent/entoutbox", "../examples/orders/ent/entoutbox"}

// readJSON decodes a JSON file for the validator (numbers kept exact).
func readJSON(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err, path)
	return v
}

// compileOffline compiles the document doc found at path; the meta-schemas
// it names (2020-12, draft-07) are the validator's own copies, and nothing
// is loaded from the network.
func compileOffline(t *testing.T, path string, doc any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(offlineLoader{})
	url := "file:///" + filepath.ToSlash(path)
	require.NoError(t, c.AddResource(url, doc))
	s, err := c.Compile(url)
	require.NoError(t, err, "compiling %s", path)
	return s
}

// offlineLoader refuses every load: all a schema needs is added to the
// compiler or built into the validator.
type offlineLoader struct{}

func (offlineLoader) Load(url string) (any, error) {
	return nil, os.ErrNotExist
}

// metaSchema2020 validates a schema document itself against 2020-12.
func metaSchema2020(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.UseLoader(offlineLoader{})
	s, err := c.Compile(codegen.JSONSchemaDialect)
	require.NoError(t, err)
	return s
}

// contractDirs returns the contract directories of every golden case that
// succeeds (see generatedCase), with the committed ones.
func contractDirs(t *testing.T) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, c := range cases {
		if _, err := os.Stat(filepath.Join("testdata", c.name, "stderr.txt")); err == nil {
			continue
		}
		dirs["case "+c.name] = filepath.Join(generatedCase(t, c), codegen.ContractDir)
	}
	for _, d := range committedContracts {
		dirs[d] = d
	}
	return dirs
}

// TestContractSchemasAre2020_12 compiles every generated payload schema as
// JSON Schema 2020-12 and validates it against the 2020-12 meta-schema.
func TestContractSchemasAre2020_12(t *testing.T) {
	meta := metaSchema2020(t)
	for name, dir := range contractDirs(t) {
		files, err := filepath.Glob(filepath.Join(dir, "schemas", "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "%s: no schema written", name)
		for _, f := range files {
			doc := readJSON(t, f)
			require.Equal(t, codegen.JSONSchemaDialect, doc.(map[string]any)["$schema"], f)
			require.NoError(t, meta.Validate(doc), "%s is not a 2020-12 schema", f)
			compileOffline(t, f, doc)
		}
	}
}

// TestAsyncAPIDocumentIsValid validates every generated AsyncAPI document
// against the official AsyncAPI 3.0.0 schema, and checks its shape: a
// channel per topic, a message per event version whose payload is the
// version's JSON Schema, a send operation per event and, with the consumer
// tables, a receive operation.
func TestAsyncAPIDocumentIsValid(t *testing.T) {
	official := compileOffline(t, asyncAPISchema, readJSON(t, asyncAPISchema))
	for name, dir := range contractDirs(t) {
		path := filepath.Join(dir, codegen.AsyncAPIFile)
		doc := readJSON(t, path)
		require.NoError(t, official.Validate(doc), "%s: %s is not a valid AsyncAPI 3.0 document", name, path)

		var d struct {
			Channels map[string]struct {
				Address  string
				Messages map[string]struct {
					Ref string `json:"$ref"`
				}
			}
			Operations map[string]struct {
				Action  string
				Channel struct {
					Ref string `json:"$ref"`
				}
				Messages []struct {
					Ref string `json:"$ref"`
				}
			}
			Components struct {
				Messages map[string]struct {
					Payload struct {
						Ref string `json:"$ref"`
					}
					Headers struct {
						Required   []string
						Properties map[string]any
					}
				}
				Schemas map[string]map[string]any
			}
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &d))
		files, err := filepath.Glob(filepath.Join(dir, "schemas", "*.json"))
		require.NoError(t, err)
		require.Len(t, d.Components.Messages, len(files), "%s: a message per schema file", name)
		for _, f := range files {
			key := strings.TrimSuffix(filepath.Base(f), ".json")
			msg, ok := d.Components.Messages[key]
			require.True(t, ok, "%s: no message %s", name, key)
			require.Equal(t, "#/components/schemas/"+key, msg.Payload.Ref)
			require.Contains(t, msg.Headers.Required, "outbox_event_name")
			require.Contains(t, msg.Headers.Properties, "ce_dataschema")
			require.Contains(t, msg.Headers.Required, "_watermill_message_uuid", "the event id, to dedupe on")
			var file map[string]any
			fb, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(fb, &file))
			delete(file, "$schema")
			require.Equal(t, file, d.Components.Schemas[key], "%s: the document's payload schema of %s is the file's", name, key)
		}
		var sends, receives int
		for opName, op := range d.Operations {
			ch := strings.TrimPrefix(op.Channel.Ref, "#/channels/")
			require.Contains(t, d.Channels, ch, opName)
			require.NotEmpty(t, op.Messages, opName)
			for _, m := range op.Messages {
				require.True(t, strings.HasPrefix(m.Ref, "#/channels/"+ch+"/messages/"), "%s: %s", opName, m.Ref)
			}
			switch op.Action {
			case "send":
				sends++
			case "receive":
				receives++
			}
		}
		for ch, c := range d.Channels {
			require.Equal(t, ch, c.Address)
		}
		require.Positive(t, sends, name)
		if !strings.HasPrefix(name, "case ") {
			require.Equal(t, sends, receives, "%s: the consumer tables are there: every event is handled", name)
		}
	}
}

// TestAsyncAPIValidationFails makes sure the official schema is applied:
// a document that breaks it is refused.
func TestAsyncAPIValidationFails(t *testing.T) {
	official := compileOffline(t, asyncAPISchema, readJSON(t, asyncAPISchema))
	doc := readJSON(t, filepath.Join(committedContracts[0], codegen.AsyncAPIFile)).(map[string]any)
	for _, op := range doc["operations"].(map[string]any) {
		op.(map[string]any)["action"] = "publish" // AsyncAPI 2's word
		break
	}
	require.Error(t, official.Validate(doc))
}

// TestContractIsDeterministic generates twice and compares.
func TestContractIsDeterministic(t *testing.T) {
	c := caseNamed(t, "kinds")
	var got []map[string][]byte
	for range 2 {
		out := t.TempDir()
		require.NoError(t, generate(t, c, out))
		got = append(got, readTree(t, filepath.Join(out, codegen.ContractDir)))
	}
	require.Equal(t, got[0], got[1])
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range got[0] {
			if !yield(k) {
				return
			}
		}
	})
	require.Contains(t, names, codegen.AsyncAPIFile)
}

// TestContractRemovesUndeclaredSchemas: a version no longer declared loses
// its schema file at the next generation; other files are left alone.
func TestContractRemovesUndeclaredSchemas(t *testing.T) {
	out := t.TempDir()
	c := caseNamed(t, "kinds")
	require.NoError(t, generate(t, c, out))
	dir := filepath.Join(out, codegen.ContractDir)
	stale := filepath.Join(dir, "schemas", "gone.v1.json")
	notes := filepath.Join(dir, "schemas", "NOTES.md")
	require.NoError(t, os.WriteFile(stale, []byte("{}"), 0o644))
	require.NoError(t, os.WriteFile(notes, []byte("mine"), 0o644))
	require.NoError(t, generate(t, c, out))
	require.NoFileExists(t, stale)
	require.FileExists(t, notes)
}

// TestCloudEventsDataSchemaNamesTheSchemaFile: the relay's ce_dataschema
// and ce_type of every event version of internal/testent name the schema
// file go generate wrote and the document's message.
func TestCloudEventsDataSchemaNamesTheSchemaFile(t *testing.T) {
	ce := &relay.CloudEvents{Source: "urn:test", DataSchemaBase: "https://contracts.example.com/test"}
	files, err := filepath.Glob(filepath.Join(committedContracts[0], "schemas", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		key := strings.TrimSuffix(filepath.Base(f), ".json")
		i := strings.LastIndex(key, ".v")
		name := key[:i]
		version, err := strconv.Atoi(key[i+2:])
		require.NoError(t, err, f)
		require.Equal(t, "https://contracts.example.com/test/"+codegen.SchemaPath(name, version), ce.DataSchema(name, version))
		require.FileExists(t, filepath.Join(committedContracts[0], filepath.FromSlash(codegen.SchemaPath(name, version))))
		require.Equal(t, key, relay.CloudEventsType(name, version), "ce_type is the message's name")
	}
}
