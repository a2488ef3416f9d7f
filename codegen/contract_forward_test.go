package codegen_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/internal/schematest"
)

// TestForwardCompatibleMeansTheSameToEveryReader: where the lock records
// a step forward compatible, and so Emit writes readable_from and the relay
// stamps outbox_readable_from, consumers of the older versions read the
// newer payloads, and so does a team validating them with the older
// versions' published schemas. For every event version of every golden
// case and committed contract, the payloads made from its schema that it
// accepts (the sample, and one change at a time at every field:
// schematest.Variants) are validated against the schema of each version
// from its readable_from on, by santhosh-tekuri/jsonschema and, where
// installed, ajv 8 (2020-12, ajv-formats): every one must pass.
func TestForwardCompatibleMeansTheSameToEveryReader(t *testing.T) {
	ajv := schematest.NewAjv(t)
	docs := map[string]map[string]any{}
	var cases []schematest.Case
	var whats []string
	steps := 0
	for name, dir := range contractDirs(t) {
		lock, err := codegen.ReadLock(filepath.Dir(dir))
		require.NoError(t, err)
		byEvent := map[string][]*codegen.LockEntry{}
		for _, e := range lock.Events {
			byEvent[e.Event] = append(byEvent[e.Event], e)
		}
		for event, entries := range byEvent {
			slices.SortFunc(entries, func(a, b *codegen.LockEntry) int { return a.Version - b.Version })
			load := func(v int) (*schematest.Schema, string) {
				path := filepath.Join(dir, filepath.FromSlash(codegen.SchemaPath(event, v)))
				id := fmt.Sprintf("%s %s.v%d", name, event, v)
				if _, err := os.Stat(path); err != nil {
					return nil, id // an event no longer declared keeps its lock entries, not its schemas
				}
				s := schematest.Load(t, path)
				docs[id] = s.Doc
				return s, id
			}
			readableFrom := 1
			for i, e := range entries {
				if i == 0 || e.ForwardCompatible == nil || !*e.ForwardCompatible {
					readableFrom = e.Version
				}
				if readableFrom == e.Version {
					continue
				}
				newer, newerID := load(e.Version)
				if newer == nil {
					continue
				}
				for v := readableFrom; v < e.Version; v++ {
					older, olderID := load(v)
					require.NotNil(t, older, "%s: no schema", olderID)
					steps++
					for _, p := range schematest.Variants(newer.Doc) {
						if !newer.Valid(p.JSON) {
							continue
						}
						what := fmt.Sprintf("%s payload (%s), readable from version %d: %s", newerID, p.What, readableFrom, schematest.Compact(p.JSON))
						require.True(t, older.Valid(p.JSON), "the schema %s refuses a %s", olderID, what)
						if !p.BeyondJS {
							cases = append(cases, schematest.Case{Schema: newerID, Payload: p.JSON},
								schematest.Case{Schema: olderID, Payload: p.JSON})
							whats = append(whats, what, what)
						}
					}
				}
			}
		}
	}
	require.Positive(t, steps, "no forward compatible step to check")
	t.Logf("%d forward compatible steps, %d payloads", steps, len(cases)/2)
	if ajv == nil {
		return
	}
	for i, v := range ajv.Validate(t, docs, cases) {
		require.True(t, v.Valid, "ajv: %s refuses the %s: %v", cases[i].Schema, whats[i], v.Errors)
	}
}

// TestSchemasOpenEveryObject: no object of a published schema closes its
// keys, at any depth (what makes the test above hold for fields a later
// version adds), in the schema files and in the AsyncAPI document's copies
// of them, which code generators for other languages read.
func TestSchemasOpenEveryObject(t *testing.T) {
	for name, dir := range contractDirs(t) {
		files, err := filepath.Glob(filepath.Join(dir, "schemas", "*.json"))
		require.NoError(t, err)
		require.FileExists(t, filepath.Join(dir, "asyncapi.json"))
		files = append(files, filepath.Join(dir, "asyncapi.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			var doc any
			require.NoError(t, json.Unmarshal(b, &doc))
			var walk func(v any, at string)
			walk = func(v any, at string) {
				switch x := v.(type) {
				case map[string]any:
					require.NotEqual(t, false, x["additionalProperties"], "%s: %s closes its object at %s", name, f, at)
					require.NotContains(t, x, "unevaluatedProperties", "%s: %s at %s", name, f, at)
					for k, sub := range x {
						walk(sub, at+"/"+k)
					}
				case []any:
					for i, sub := range x {
						walk(sub, fmt.Sprintf("%s/%d", at, i))
					}
				}
			}
			walk(doc, "")
		}
	}
}
