package codegen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// testentContract is the contract go generate wrote for internal/testent.
const testentContract = "../internal/testent/entoutbox"

// payloadSchemas compiles the committed schema of every event version of
// internal/testent, by "name.vN".
func payloadSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testentContract, "schemas", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]*jsonschema.Schema{}
	for _, f := range files {
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = compileOffline(t, f, readJSON(t, f))
	}
	return out
}

func validatePayload(t *testing.T, s *jsonschema.Schema, payload []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	require.NoError(t, err)
	return s.Validate(v)
}

// TestEmittedPayloadsMatchTheirSchemas emits every event of internal/testent
// through the database, and builds the payload of every older version with
// outboxtest, and validates each against its version's generated schema.
// Every schema must have been checked against at least one payload.
func TestEmittedPayloadsMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	schemas := payloadSchemas(t)
	checked := map[string]int{}
	check := func(name string, version int, payload []byte) {
		t.Helper()
		key := fmt.Sprintf("%s.v%d", name, version)
		s, ok := schemas[key]
		require.True(t, ok, "no schema %s", key)
		require.NoError(t, validatePayload(t, s, payload), "%s payload %s", key, payload)
		checked[key]++
	}

	deleted := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
		for _, emit := range []func() error{
			func() error {
				return tx.Outbox.EmitOrderPaid(ctx, "o-1", testent.OrderPaid{OrderID: 1, AmountCents: 4200})
			},
			func() error {
				return tx.Outbox.EmitOrderPaid(ctx, "o-2", testent.OrderPaid{OrderID: 2, AmountCents: 1, Currency: "USD"})
			},
			func() error {
				return tx.Outbox.EmitProfileUpdated(ctx, "p-1", testent.ProfileUpdated{
					DisplayName: "Ada", Score: -3, Balance: 1.5, UpdatedAt: time.Now(), SessionID: uuid.New(),
					Plan: "free", Settings: json.RawMessage(`{"theme":"dark"}`), Tags: []string{}})
			},
			func() error {
				return tx.Outbox.EmitProfileUpdated(ctx, "p-2", testent.ProfileUpdated{
					DisplayName: "Grace", Nickname: "gh", Verified: true, Score: 1 << 30, UpdatedAt: time.Now(),
					DeletedAt: &deleted, SessionID: uuid.New(), Plan: "pro", Avatar: []byte{0, 1, 2},
					Settings: json.RawMessage(`null`), Tags: []string{"a", "b"}, FriendIds: []int64{7}})
			},
			func() error {
				return tx.Outbox.EmitPriceChanged(ctx, "sku-1", testent.PriceChanged{Sku: "sku-1", Amount: 9.99})
			},
			func() error {
				return tx.Outbox.EmitOrderPlaced(ctx, "o-3", testent.OrderPlaced{OrderID: 3,
					Lines:      []testent.OrderPlacedLine{{Sku: "a", Qty: 1}, {Sku: "b", Qty: 2, Unit: "kg", Pack: 6}},
					Address:    testent.OrderPlacedAddress{Street: "1 rue", City: "Lyon"},
					Attributes: map[string]testent.OrderPlacedAttribute{"gift": {Value: "yes"}}})
			},
			func() error {
				return tx.Outbox.EmitCartChanged(ctx, "c-1", testent.CartChanged{Lines: []testent.CartChangedLine{{Sku: "a", Amount: 1.25}}})
			},
			func() error {
				return tx.Outbox.EmitOrderPlaced(ctx, "o-4", testent.OrderPlaced{OrderID: 4, Lines: []testent.OrderPlacedLine{},
					Address: testent.OrderPlacedAddress{Street: "2 rue", City: "Nice", Country: "IT"}})
			},
			func() error {
				return tx.Outbox.EmitShipmentBooked(ctx, "s-1", testent.ShipmentBooked{OrderID: 5, Carrier: "ups", Service: "express"})
			},
			func() error {
				nick, ref, theme := "ada", int64(-7), "dark"
				return tx.Outbox.EmitAllKinds(ctx, "k-1", testent.AllKinds{S: "été", Nick: &nick, B: true, I: 150, I32: 1,
					I64: -1 << 63, Ref: &ref, F: -1000.5, Ratio: 0.5, At: time.Now(), DeletedAt: &deleted, ID: uuid.New(),
					Size: "M", Sig: []byte{}, Avatar: []byte{0xff}, Settings: json.RawMessage(`{"a":[1,null]}`), Theme: &theme,
					Tags: []string{}, Lucky: []int{7}, Friends: []int64{1 << 62}, Coords: []float64{1.5}, Channel: "web",
					Address: testent.AllKindsAddress{City: "Lyon"}, Billing: &testent.AllKindsBilling{Vat: "FR1"},
					Lines: []testent.AllKindsLine{{Sku: "a", Qty: 2}}, Grid: [][]int{{9}}, Stock: map[string]int64{},
					Attrs: map[string]testent.AllKindsAttr{"k": {Value: "ünï", At: time.Now()}}})
			},
			func() error {
				return tx.Outbox.EmitPaymentReminder(ctx, 6, testent.PaymentReminder{OrderID: 6})
			},
			func() error {
				return tx.Outbox.EmitAuditRecorded(ctx, "a-1", testent.AuditRecorded{Action: "login"})
			},
		} {
			if err := emit(); err != nil {
				return err
			}
		}
		return nil
	}))
	rows, err := db.DB.QueryContext(ctx, `SELECT event_name, event_version, payload FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			name    string
			version int
			payload []byte
		)
		require.NoError(t, rows.Scan(&name, &version, &payload))
		check(name, version, payload)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 12, n)

	// Older versions, as rows written before a deploy carry them.
	for _, p := range []events.Payload{
		testent.OrderPaidV1{OrderID: 1, AmountCents: 0},
		testent.PriceChangedV1{Sku: "a", Cents: 5},
		testent.PriceChangedV2{Sku: "a", Cents: 5, Currency: "EUR"},
		testent.CartChangedV1{Lines: []testent.CartChangedV1Line{{Sku: "a", Cents: 5}}},
		testent.CartChangedV2{Lines: []testent.CartChangedV2Line{{Sku: "a", Cents: 5, Currency: "EUR"}}},
		testent.OrderPlacedV1{OrderID: 1, Lines: []testent.OrderPlacedV1Line{{Sku: "a", Qty: 1}},
			Address: testent.OrderPlacedV1Address{Street: "s", City: "c"}},
		testent.ShipmentBookedV1{OrderID: 1, Carrier: "ups"},
		testent.AllKindsV1{S: "s", At: time.Now(), ID: uuid.New(), Size: "S", Sig: []byte{1}, Settings: json.RawMessage(`null`),
			Tags: []string{"t"}, Friends: []int64{}, Address: testent.AllKindsV1Address{City: "c"},
			Lines: []testent.AllKindsV1Line{}, Stock: map[string]int64{"x": 1}},
	} {
		msg := outboxtest.Message(t, p, "agg-1")
		name, version := p.OutboxEvent()
		check(name, version, msg.Payload)
	}
	for key := range schemas {
		require.Positive(t, checked[key], "no payload of %s was checked against its schema", key)
	}
}

// TestSchemasRefuseInvalidPayloads: payloads the generated Validate refuses
// are refused by the schema too, for the rule that makes them invalid.
func TestSchemasRefuseInvalidPayloads(t *testing.T) {
	t.Parallel()
	schemas := payloadSchemas(t)
	accepts := generatedHandlers(t)
	validate := map[string]func([]byte) error{
		"order.paid.v2":      goValidate[testent.OrderPaid],
		"profile.updated.v1": goValidate[testent.ProfileUpdated],
		"price.changed.v3":   goValidate[testent.PriceChanged],
		"order.placed.v2":    goValidate[testent.OrderPlaced],
	}
	placed := func(change func(map[string]any)) string {
		p := map[string]any{"order_id": 1,
			"lines":      []any{map[string]any{"sku": "a", "qty": 1, "unit": "piece", "pack": 1}},
			"address":    map[string]any{"street": "s", "city": "c", "country": "FR"},
			"attributes": map[string]any{"gift": map[string]any{"value": "yes"}}}
		change(p)
		b, _ := json.Marshal(p)
		return string(b)
	}
	line := func(p map[string]any) map[string]any { return p["lines"].([]any)[0].(map[string]any) }
	profile := func(change func(map[string]any)) string {
		p := map[string]any{"display_name": "Ada", "verified": false, "score": 1, "balance": 0,
			"updated_at": "2026-01-02T03:04:05Z", "session_id": "0b5e6f5c-3f0e-4a8e-9d3f-0a1b2c3d4e5f",
			"plan": "free", "settings": map[string]any{}, "tags": []any{}}
		change(p)
		b, _ := json.Marshal(p)
		return string(b)
	}
	for _, c := range []struct {
		schema, payload, why string
	}{
		{"order.paid.v2", `{"order_id": 1, "amount_cents": 0, "currency": "EUR"}`, "exclusiveMinimum"},
		{"order.paid.v2", `{"order_id": 1, "amount_cents": 5, "currency": "GBP"}`, "enum"},
		{"order.paid.v2", `{"amount_cents": 5}`, "required"},
		{"order.paid.v2", `{"order_id": 1.5, "amount_cents": 5}`, "type"},
		{"profile.updated.v1", profile(func(p map[string]any) { p["display_name"] = "" }), "minLength"},
		{"profile.updated.v1", profile(func(p map[string]any) { p["session_id"] = "00000000-0000-0000-0000-000000000000" }), "not"},
		{"profile.updated.v1", profile(func(p map[string]any) { p["updated_at"] = "0001-01-01T00:00:00Z" }), "not"},
		{"profile.updated.v1", profile(func(p map[string]any) { p["tags"] = nil }), "type"},
		{"profile.updated.v1", profile(func(p map[string]any) { p["plan"] = "gold" }), "enum"},
		{"profile.updated.v1", profile(func(p map[string]any) { p["score"] = 1 << 31 }), "maximum"},
		{"price.changed.v3", `{"sku": "", "amount": 1}`, "minLength"},
		{"order.placed.v2", placed(func(p map[string]any) { line(p)["sku"] = "" }), "minLength"},
		{"order.placed.v2", placed(func(p map[string]any) { line(p)["qty"] = 0 }), "minimum"},
		{"order.placed.v2", placed(func(p map[string]any) { line(p)["unit"] = "box" }), "enum"},
		{"order.placed.v2", placed(func(p map[string]any) { p["lines"] = nil }), "type"},
		{"order.placed.v2", placed(func(p map[string]any) { p["address"].(map[string]any)["city"] = "" }), "minLength"},
		{"order.placed.v2", placed(func(p map[string]any) {
			p["attributes"].(map[string]any)["gift"] = map[string]any{"value": strings.Repeat("x", 17)}
		}), "maxLength"},
		{"order.placed.v2", placed(func(p map[string]any) { p["attributes"].(map[string]any)["gift"] = "yes" }), "type"},
		{"order.placed.v2", placed(func(p map[string]any) { delete(p, "address") }), "required"},
	} {
		t.Run(c.schema+" "+c.why, func(t *testing.T) {
			err := validatePayload(t, schemas[c.schema], []byte(c.payload))
			require.Error(t, err, "the schema takes %s", c.payload)
			require.Contains(t, failedKeywords(err), c.why, "refused for another rule: %v", err)
			require.False(t, accepts(c.schema, c.payload), "the generated handlers take what the schema refuses: %s", c.payload)
			// Validate sees a missing number as 0; the schema holds other
			// producers to the keys Emit writes (and so do the generated
			// handlers, which check the schema: contract_strict_test.go).
			if v, ok := validate[c.schema]; ok && c.why != "required" {
				require.Error(t, v([]byte(c.payload)), "Validate takes what the schema refuses: %s", c.payload)
			}
		})
	}
	// The same payloads, made valid, pass both.
	for _, ok := range []struct{ schema, payload string }{
		{"order.paid.v2", `{"order_id": 1, "amount_cents": 5}`},
		{"profile.updated.v1", profile(func(map[string]any) {})},
		// Nillable: null decodes to nil, as an absent key does.
		{"profile.updated.v1", profile(func(p map[string]any) { p["deleted_at"] = nil })},
		{"order.placed.v2", placed(func(map[string]any) {})},
		// Keys a version does not declare are allowed at every depth: later
		// versions add them.
		{"order.paid.v2", `{"order_id": 1, "amount_cents": 5, "note": "x"}`},
		{"order.placed.v2", placed(func(p map[string]any) { line(p)["colour"] = "red" })},
	} {
		require.NoError(t, validatePayload(t, schemas[ok.schema], []byte(ok.payload)))
		require.True(t, accepts(ok.schema, ok.payload), "the generated handlers refuse what the schema takes: %s", ok.payload)
		require.NoError(t, validate[ok.schema]([]byte(ok.payload)))
	}
}

// generatedHandlers returns whether internal/testent's generated handlers,
// which hold a payload to their generated check of the schema, hand
// payload, as schema ("name.vN", a latest version), to the handler.
func generatedHandlers(t *testing.T) func(schema, payload string) bool {
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	h := testent.NewOutboxHandlers(client)
	handled := map[string]bool{} // by aggregate id
	note := func(m events.Meta) { handled[m.AggregateID] = true }
	h.OnOrderPaid("c", func(_ context.Context, _ *testent.Tx, _ *testent.OrderPaid, m events.Meta) error { note(m); return nil })
	h.OnProfileUpdated("c", func(_ context.Context, _ *testent.Tx, _ *testent.ProfileUpdated, m events.Meta) error {
		note(m)
		return nil
	})
	h.OnPriceChanged("c", func(_ context.Context, _ *testent.Tx, _ *testent.PriceChanged, m events.Meta) error {
		note(m)
		return nil
	})
	h.OnOrderPlaced("c", func(_ context.Context, _ *testent.Tx, _ *testent.OrderPlaced, m events.Meta) error {
		note(m)
		return nil
	})
	n := 0
	return func(schema, payload string) bool {
		n++
		id := fmt.Sprintf("case-%d", n)
		name, version, _ := strings.Cut(schema, ".v")
		msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 1}, id)
		msg.Metadata.Set(events.MetaEventName, name)
		msg.Metadata.Set(events.MetaEventVersion, version)
		msg.Payload = []byte(payload)
		require.NoError(t, h.Handle(t.Context(), "c", msg))
		return handled[id]
	}
}

// goValidate decodes payload as the generated handlers do and validates it.
func goValidate[T any, P interface {
	*T
	Validate() error
}](payload []byte) error {
	var v T
	if err := json.Unmarshal(payload, &v); err != nil {
		return err
	}
	return P(&v).Validate()
}

// failedKeywords are the keywords a validation failed on, at any depth.
func failedKeywords(err error) []string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			k := strings.Join(e.ErrorKind.KeywordPath(), "/")
			if k == "" { // not's kind names no keyword
				k = strings.ToLower(strings.TrimPrefix(fmt.Sprintf("%T", e.ErrorKind), "*kind."))
			}
			out = append(out, k)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	if ve, ok := err.(*jsonschema.ValidationError); ok {
		walk(ve)
	}
	return out
}
