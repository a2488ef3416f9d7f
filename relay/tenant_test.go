package relay_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// A relay given a tenant puts it on every message, on every path: under
// outbox_tenant, and as the CloudEvents extension tenant, which the
// CloudEvents SDK reads as one.
func TestRelayedMessagesCarryTheTenant(t *testing.T) {
	t.Parallel()
	forPaths(t, testRelayedMessagesCarryTheTenant)
}

func testRelayedMessagesCarryTheTenant(t *testing.T, p *onPath) {
	ctx := context.Background()
	b := p.emitBundle
	pubsub, got := receiveInProcess(t, "orders")
	id := uuid.New()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "order-7", testent.OrderPaid{OrderID: 7, AmountCents: 4200}, events.WithEventID(id))
	}))
	stop := runRelay(t, p.config(relay.Config{Publisher: pubsub, Tenant: "acme-eu.1",
		CloudEvents: &relay.CloudEvents{Source: "urn:shop:orders"}}))
	got.waitFor(t, emitted{ids: map[string]bool{id.String(): true}}, patience)
	require.NoError(t, stop())
	msg := got.msgs[id.String()]
	require.Equal(t, "acme-eu.1", msg.Metadata.Get(events.MetaTenant))
	ev, err := binding.ToEvent(ctx, kafkaStyle(msg))
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	require.Equal(t, map[string]any{relay.CloudEventsTenant: "acme-eu.1"}, ev.Extensions())
}

// A tenant name a broker's headers could not carry as it is is refused.
func TestRelayRefusesATenantName(t *testing.T) {
	for _, name := range []string{"acme corp", "-acme", "acmé", "a%b", string(make([]byte, 64))} {
		require.Error(t, relay.CheckTenant(name), "%q", name)
	}
	for _, name := range []string{"", "acme", "Acme-EU_2.prod"} {
		require.NoError(t, relay.CheckTenant(name), "%q", name)
	}
	_, err := relay.New(relay.Config{DB: setupEmit(t).db.DB, Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), Tenant: "acme corp"})
	require.ErrorContains(t, err, `relay: Config.Tenant: tenant "acme corp": character ' ' at byte 4`)
}
