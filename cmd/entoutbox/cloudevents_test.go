package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// TestRelayCloudEventsFlags: the flags reach relay.Config.CloudEvents, whose
// checks name the field; a data schema base alone is refused.
func TestRelayCloudEventsFlags(t *testing.T) {
	_, err := run(t, nil, "relay", "--database-url", pgtest.ServerURL(), "--broker", "mem://",
		"--cloudevents-dataschema-base", "https://contracts.example.com/orders/")
	require.EqualError(t, err, "--cloudevents-dataschema-base needs --cloudevents-source")
	_, err = run(t, nil, "relay", "--database-url", pgtest.ServerURL(), "--broker", "mem://",
		"--cloudevents-source", "urn:shop:orders", "--cloudevents-dataschema-base", "contracts/orders")
	require.EqualError(t, err, `relay: Config.CloudEvents.DataSchemaBase "contracts/orders" is not an absolute URI`)
}
