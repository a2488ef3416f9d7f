package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/schematest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
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
func publishedSchemas(t testing.TB) ([]publishedSchema, map[string]int) {
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
// default). The generated check's own verdict on each payload is held to
// both validators.
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
		as        publishedSchema
		payload   schematest.Payload
		valid     bool
		generated bool // the generated check's verdict
	}
	var outcomes []outcome
	accepted, refused := 0, 0
	for _, from := range schemas {
		for _, p := range schematest.Variants(from.schema.Doc) {
			for _, as := range byEvent[from.name] {
				valid := as.schema.Valid(p.JSON)
				decoded, err := consumer.DecodePayload(h, as.name, as.version, p.JSON)
				what := fmt.Sprintf("%s payload, %s, decoded as version %d: %s", from.id, p.What, as.version, schematest.Compact(p.JSON))
				generated, seen := consumer.GeneratedVerdict("entoutbox/schemas/"+as.id+".json", p.JSON)
				require.True(t, seen || !valid, "%s: the generated check never saw it", what)
				require.Equal(t, valid, generated, "the generated check and the schema disagree on %s", what)
				outcomes = append(outcomes, outcome{as, p, valid, generated})
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
		require.Equal(t, o.generated, v.Valid, "ajv and the generated check disagree on %s (%s): %s; ajv: %v",
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

// What the published schema refuses reaches the dead letters through a
// handler set, its reason naming the field (a missing number or bool,
// null, a key in another case, "" for a default, a UUID without dashes or
// in braces, bytes that are not base64, at any depth) or saying the
// payload is no object; what it accepts is handled, read as the schema
// reads it (1.0 and 5e2 as integers, keys no version declares ignored, a
// key given twice read with its last value).
func TestSchemaRefusalsAreDeadLetteredWithTheirField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var calls atomic.Int64
	var got []testent.OrderPaid
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		got = append(got, *e)
		return invoiceHandler(&calls)(ctx, tx, e, m)
	})
	h.OnAllKinds("billing", func(context.Context, *testent.Tx, *testent.AllKinds, events.Meta) error { return nil })
	sample := schematest.Load(t, filepath.Join(testentContract, "schemas", "all.kinds.v2.json"))
	kinds := func(change func(map[string]any)) string {
		b, err := json.Marshal(schematest.Sample(sample.Doc))
		require.NoError(t, err)
		var p map[string]any
		require.NoError(t, json.Unmarshal(b, &p))
		change(p)
		b, err = json.Marshal(p)
		require.NoError(t, err)
		return string(b)
	}
	refused := map[string]struct{ event, payload, reason string }{
		"missing": {"order.paid", `{"order_id": 1}`, `field "amount_cents" is missing`},
		"null":    {"order.paid", `{"order_id": 2, "amount_cents": null}`, `field "amount_cents" is null`},
		"case":    {"order.paid", `{"order_id": 3, "Amount_Cents": 5}`, `field "amount_cents" is missing`},
		"empty":   {"order.paid", `{"order_id": 4, "amount_cents": 5, "currency": ""}`, `field "currency" value "" is not one of ["EUR","USD"]`},
		"uuid": {"all.kinds", kinds(func(p map[string]any) { p["id"] = "6f1c2a8e1d2b4c3d9e4f5a6b7c8d9e0f" }),
			`field "id" "6f1c2a8e1d2b4c3d9e4f5a6b7c8d9e0f" is not a UUID in its canonical form`},
		"bytes": {"all.kinds", kinds(func(p map[string]any) { p["sig"] = "_-8=" }),
			`field "sig" "_-8=" is not padded standard base64`},
		"float": {"all.kinds", strings.Replace(kinds(func(p map[string]any) { p["f"] = json.Number("1") }), `"f":1`, `"f":1e400`, 1),
			`field "f" value 1e400 is above the maximum 1.7976931348623157e+308`},
		"bool": {"all.kinds", kinds(func(p map[string]any) { delete(p, "b") }), `field "b" is missing`},
		"braces": {"all.kinds", kinds(func(p map[string]any) { p["id"] = "{6f1c2a8e-1d2b-4c3d-9e4f-5a6b7c8d9e0f}" }),
			`field "id" "{6f1c2a8e-1d2b-4c3d-9e4f-5a6b7c8d9e0f}" is not a UUID in its canonical form`},
		"array": {"order.paid", `[{"order_id": 5, "amount_cents": 5}]`, `the payload is an array, want object`},
		"nested": {"all.kinds", kinds(func(p map[string]any) { p["lines"].([]any)[0].(map[string]any)["qty"] = "1" }),
			`field "lines[0].qty" is a string, want integer`},
		"map": {"all.kinds", kinds(func(p map[string]any) { p["attrs"].(map[string]any)["k1"].(map[string]any)["value"] = nil }),
			`field "attrs[\"k1\"].value" is null`},
	}
	for id, c := range refused {
		msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 9, AmountCents: 9}, id)
		msg.Metadata.Set(events.MetaEventName, c.event)
		msg.Payload = []byte(c.payload)
		require.NoError(t, h.Handle(ctx, "billing", msg))
	}
	accepted := outboxtest.Message(t, testent.OrderPaid{OrderID: 9, AmountCents: 9}, "accepted")
	accepted.Payload = []byte(`{"order_id": 7.0, "amount_cents": 5e2, "note": {"deep": [null]}, "CURRENCY": "USD"}`)
	require.NoError(t, h.Handle(ctx, "billing", accepted))
	twice := outboxtest.Message(t, testent.OrderPaid{OrderID: 9, AmountCents: 9}, "twice")
	twice.Payload = []byte(`{"order_id": "x", "order_id": 8, "amount_cents": 6, "currency": "USD"}`)
	require.NoError(t, h.Handle(ctx, "billing", twice))
	require.Equal(t, []testent.OrderPaid{{OrderID: 7, AmountCents: 500, Currency: "EUR"}, {OrderID: 8, AmountCents: 6, Currency: "USD"}}, got)

	reasons := map[string]string{}
	for _, dl := range b.client.DeadLetter.Query().AllX(ctx) {
		reasons[dl.AggregateID] = dl.Reason
	}
	require.Len(t, reasons, len(refused))
	for id, c := range refused {
		require.Contains(t, reasons[id], c.reason, id)
	}
}
