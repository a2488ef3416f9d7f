package consumer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// Upcasting reaches nested objects: the automatic step from version 1 fills
// version 2's default inside each line (not version 3's), the declared
// Upcast maps each line from version 2 to 3, the latest version's nested
// defaults fill what is still absent, and a line that its version's schema
// refuses is the dead letter's reason, with the line's path.
func TestUpcastReachesNestedObjects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	got := map[string]testent.CartChanged{}
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnCartChanged("pricing", func(ctx context.Context, tx *testent.Tx, e *testent.CartChanged, m events.Meta) error {
		got[m.AggregateID] = *e
		return nil
	})
	v1 := outboxtest.Message(t, testent.CartChangedV1{Lines: []testent.CartChangedV1Line{{Sku: "a", Cents: 1999}, {Sku: "b", Cents: 5}}}, "v1")
	require.JSONEq(t, `{"lines": [{"sku": "a", "cents": 1999}, {"sku": "b", "cents": 5}]}`, string(v1.Payload), "version 1 lines have no currency")
	require.NoError(t, h.Handle(ctx, "pricing", v1))
	require.NoError(t, h.Handle(ctx, "pricing", outboxtest.Message(t,
		testent.CartChangedV2{Lines: []testent.CartChangedV2Line{{Sku: "c", Cents: 500, Currency: "GBP"}}}, "v2")))
	v3 := outboxtest.Message(t, testent.CartChanged{Lines: []testent.CartChangedLine{{Sku: "d", Amount: 1.5}}}, "v3")
	require.JSONEq(t, `{"lines": [{"sku": "d", "amount": 1.5, "currency": "USD"}]}`, string(v3.Payload), "the default, as Emit writes it")
	require.NoError(t, h.Handle(ctx, "pricing", v3))
	require.Equal(t, map[string]testent.CartChanged{
		"v1": {Lines: []testent.CartChangedLine{{Sku: "a", Amount: 19.99, Currency: "EUR"}, {Sku: "b", Amount: 0.05, Currency: "EUR"}}},
		"v2": {Lines: []testent.CartChangedLine{{Sku: "c", Amount: 5, Currency: "GBP"}}},
		"v3": {Lines: []testent.CartChangedLine{{Sku: "d", Amount: 1.5, Currency: "USD"}}},
	}, got)

	bad := outboxtest.Message(t, testent.CartChangedV2{Lines: []testent.CartChangedV2Line{}}, "bad")
	bad.Payload = []byte(`{"lines": [{"sku": "e", "cents": 1}, {"sku": "f", "cents": "twelve"}]}`)
	require.NoError(t, h.Handle(ctx, "pricing", bad))
	require.NotContains(t, got, "bad")
	invalid := outboxtest.Message(t, testent.CartChanged{Lines: []testent.CartChangedLine{}}, "invalid")
	invalid.Payload = []byte(`{"lines": [{"sku": "g", "amount": 1}, {"amount": 2}]}`)
	require.NoError(t, h.Handle(ctx, "pricing", invalid))
	require.NotContains(t, got, "invalid")
	reasons := map[string]string{}
	for _, dl := range b.client.DeadLetter.Query().AllX(ctx) {
		reasons[dl.AggregateID] = dl.Reason
	}
	require.Equal(t, map[string]string{
		"bad":     `events: invalid "cart.changed" v2 payload: field "lines[1].cents" is a string, want integer (JSON Schema entoutbox/schemas/cart.changed.v2.json)`,
		"invalid": `events: invalid "cart.changed" v3 payload: field "lines[1].sku" is missing (JSON Schema entoutbox/schemas/cart.changed.v3.json)`,
	}, reasons)
}
