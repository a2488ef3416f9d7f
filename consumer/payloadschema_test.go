package consumer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/schematest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// testentContract is where go generate published internal/testent's
// contract.
const testentContract = "../internal/testent/entoutbox"

// publishedSchema is one version's schema file of internal/testent.
type publishedSchema struct {
	id      string // name.vN
	name    string
	version int
	schema  *schematest.Schema
}

var schemaFile = regexp.MustCompile(`^(.+)\.v([0-9]+)\.json$`)

// publishedSchemas loads every schema internal/testent publishes, with the
// newest version of each event.
func publishedSchemas(t *testing.T) ([]publishedSchema, map[string]int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testentContract, "schemas", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []publishedSchema
	latest := map[string]int{}
	for _, f := range files {
		m := schemaFile.FindStringSubmatch(filepath.Base(f))
		require.NotNil(t, m, f)
		v, _ := strconv.Atoi(m[2])
		out = append(out, publishedSchema{id: m[1] + ".v" + m[2], name: m[1], version: v, schema: schematest.Load(t, f)})
		latest[m[1]] = max(latest[m[1]], v)
	}
	return out, latest
}

// TestGeneratedHandlersAcceptWhatTheSchemaAccepts holds the generated
// handlers' decoding to the published JSON Schema, in both directions,
// over payloads made from the schemas: for every event version of
// internal/testent (all.kinds has every kind of field, each presence,
// nested objects, lists and maps), the sample and the sample with one
// change at a time at every field (schematest.Variants), each decoded as
// that version and every other version of its event. Validators that are
// not the code under test decide: santhosh-tekuri/jsonschema compiled
// here, and ajv 8 (2020-12, ajv-formats) where installed, which must agree
// with each other. What they refuse, the handlers refuse, naming the
// changed field; what they accept, the handlers accept, and, as the latest
// version, read as they do (ReadAlike: not "S" for "s", not "" for a
// default).
func TestGeneratedHandlersAcceptWhatTheSchemaAccepts(t *testing.T) {
	t.Parallel()
	h := testent.NewOutboxHandlers(testent.NewClient()) // decoding needs no database
	schemas, latest := publishedSchemas(t)
	byEvent := map[string][]publishedSchema{}
	for _, s := range schemas {
		byEvent[s.name] = append(byEvent[s.name], s)
	}
	backward := backwardCompatible(t, latest)
	kinds := map[string]bool{}
	type outcome struct {
		as      publishedSchema
		payload schematest.Payload
		valid   bool
	}
	var outcomes []outcome
	accepted, refused := 0, 0
	for _, from := range schemas {
		for _, p := range schematest.Variants(from.schema.Doc) {
			for _, as := range byEvent[from.name] {
				valid := as.schema.Valid(p.JSON)
				outcomes = append(outcomes, outcome{as, p, valid})
				decoded, err := consumer.DecodePayload(h, as.name, as.version, p.JSON)
				what := fmt.Sprintf("%s payload, %s, decoded as version %d: %s", from.id, p.What, as.version, schematest.Compact(p.JSON))
				if !valid {
					refused++
					require.Error(t, err, "the handlers take what the schema refuses: %s", what)
					var ve *events.ValidationError
					require.True(t, errors.As(err, &ve), "%s: %v is no *events.ValidationError", what, err)
					if as.id == from.id { // made from another version, it may be refused for another field
						require.True(t, ve.Field == p.Path || strings.Contains(ve.Reason, fmt.Sprintf("field %q", p.Path)),
							"%s: the refusal does not name field %q: %v", what, p.Path, err)
					}
					continue
				}
				accepted++
				if err != nil && !backward(as.name, as.version) {
					// An older version read as the latest is also held to the
					// latest's rules where the step is not backward compatible.
					require.ErrorContains(t, err, fmt.Sprintf("version %d payload upcast to version %d", as.version, latest[as.name]), what)
					continue
				}
				require.NoError(t, err, "the handlers refuse what the schema accepts: %s", what)
				if as.version == latest[as.name] {
					b, err := json.Marshal(decoded)
					require.NoError(t, err)
					require.NoError(t, schematest.ReadAlike(as.schema.Doc, p.JSON, b), "%s\nread as %s", what, b)
				}
			}
		}
		collectKinds(from.schema.Doc, kinds)
	}
	t.Logf("%d payloads the schema accepts, %d it refuses", accepted, refused)
	require.Positive(t, accepted)
	require.Positive(t, refused)
	for _, k := range []string{"string", "enum", "boolean", "int64", "int32", "double", "date-time", "uuid", "base64",
		"json", "array", "object", "map", "nullable"} {
		require.True(t, kinds[k], "no published schema has a %s field", k)
	}

	ajv := schematest.NewAjv(t)
	if ajv == nil {
		return
	}
	docs := map[string]map[string]any{}
	for _, s := range schemas {
		docs[s.id] = s.schema.Doc
	}
	var cases []schematest.Case
	for _, o := range outcomes {
		cases = append(cases, schematest.Case{Schema: o.as.id, Payload: o.payload.JSON})
	}
	compared := 0
	for i, v := range ajv.Validate(t, docs, cases) {
		o := outcomes[i]
		if o.payload.BeyondJS {
			continue
		}
		require.Equal(t, o.valid, v.Valid, "ajv and santhosh-tekuri/jsonschema disagree on %s (%s): %s; ajv: %v",
			o.as.id, o.payload.What, schematest.Compact(o.payload.JSON), v.Errors)
		compared++
	}
	t.Logf("ajv agrees on %d of them (%d hold a number JavaScript cannot hold exactly)", compared, len(cases)-compared)
}

// backwardCompatible reads internal/testent's lock: whether the latest
// version of an event reads every payload of a version without refusing
// one (the steps between them are backward compatible).
func backwardCompatible(t *testing.T, latest map[string]int) func(name string, version int) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testentContract, "..", "entoutbox.lock.json"))
	require.NoError(t, err)
	var lock struct {
		Events []struct {
			Event              string `json:"event"`
			Version            int    `json:"version"`
			BackwardCompatible *bool  `json:"backward_compatible"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(b, &lock))
	step := map[string]bool{}
	for _, e := range lock.Events {
		step[fmt.Sprintf("%s.v%d", e.Event, e.Version)] = e.BackwardCompatible == nil || *e.BackwardCompatible
	}
	return func(name string, version int) bool {
		for v := version + 1; v <= latest[name]; v++ {
			if !step[fmt.Sprintf("%s.v%d", name, v)] {
				return false
			}
		}
		return true
	}
}

// collectKinds notes the kinds of field a schema holds.
func collectKinds(n map[string]any, kinds map[string]bool) {
	switch t := n["type"].(type) {
	case []any:
		kinds["nullable"] = true
		for _, x := range t {
			kinds[fmt.Sprint(x)] = true
		}
	case string:
		kinds[t] = true
	case nil:
		kinds["json"] = true
	}
	if _, ok := n["enum"]; ok {
		kinds["enum"] = true
	}
	if f, ok := n["format"].(string); ok {
		kinds[f] = true
	}
	if n["contentEncoding"] == "base64" {
		kinds["base64"] = true
	}
	if props, ok := n["properties"].(map[string]any); ok {
		for _, p := range props {
			collectKinds(p.(map[string]any), kinds)
		}
	} else if values, ok := n["additionalProperties"].(map[string]any); ok {
		kinds["map"] = true
		collectKinds(values, kinds)
	}
	if items, ok := n["items"].(map[string]any); ok {
		collectKinds(items, kinds)
	}
}
