package relay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

type orderID int64

// Emit takes the aggregate id as ent hands it out, int, int64, a UUID or
// a string, or a named type of one, with no conversion at the call site,
// and stores it as text; the limits on the text stay, and an id of another
// type is refused naming the event and the type.
func TestEmitTakesAggregateIDsAsEntHoldsThem(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	u := uuid.MustParse("0190a3c2-7b1e-7000-8000-00000000002a")
	err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
		for _, id := range []events.AggregateID{7, int64(8), u, "order-9", orderID(10)} {
			if err := tx.Outbox.EmitOrderPaid(ctx, id, testent.OrderPaid{OrderID: 1, AmountCents: 5}); err != nil {
				return err
			}
		}
		const prefix = `events: invalid "order.paid" v2 event: `
		for id, want := range map[events.AggregateID]string{
			1.5:                      "aggregate id of type float64: want a string, an integer or a UUID (or a type of one of those kinds)",
			"":                       "aggregate id is empty",
			strings.Repeat("1", 256): `aggregate id "` + strings.Repeat("1", 64) + `"... is 256 bytes, more than 255`,
		} {
			err := tx.Outbox.EmitOrderPaid(ctx, id, testent.OrderPaid{OrderID: 1, AmountCents: 5})
			var verr *events.ValidationError
			require.ErrorAs(t, err, &verr, "%T", id)
			require.EqualError(t, err, prefix+want)
		}
		return nil
	})
	require.NoError(t, err)
	var ids []string
	for _, r := range b.rows(t) {
		ids = append(ids, r.AggregateID)
	}
	require.Equal(t, []string{"7", "8", "0190a3c2-7b1e-7000-8000-00000000002a", "order-9", "10"}, ids)
}
