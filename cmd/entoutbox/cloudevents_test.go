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

// TestRelayCloudEventsPrefix: the attribute keys follow the broker's
// CloudEvents binding unless --cloudevents-prefix says otherwise.
func TestRelayCloudEventsPrefix(t *testing.T) {
	for _, c := range []struct{ broker, flag, want string }{
		{"nats://127.0.0.1:4222", "", "ce-"},
		{"amqp://guest:guest@127.0.0.1:5672/", "", "cloudEvents_"},
		{"AMQPS://rabbit.example.com/", "", "cloudEvents_"},
		{"kafka://127.0.0.1:9092", "", "ce_"},
		{"redis://127.0.0.1:6379/0", "", "ce_"},
		{"amqp://guest:guest@127.0.0.1:5672/", "cloudEvents:", "cloudEvents:"},
	} {
		args := []string{"--broker", c.broker, "--cloudevents-source", "urn:shop:orders"}
		if c.flag != "" {
			args = append(args, "--cloudevents-prefix", c.flag)
		}
		o, flags := parseRelayFlags(t, args...)
		require.NoError(t, o.check(flags))
		require.Equal(t, c.want, o.config().CloudEvents.Prefix, "%s %s", c.broker, c.flag)
	}
	_, err := run(t, nil, "relay", "--database-url", pgtest.ServerURL(), "--broker", "mem://", "--cloudevents-prefix", "ce-")
	require.EqualError(t, err, "--cloudevents-prefix needs --cloudevents-source")
	_, err = run(t, nil, "relay", "--database-url", pgtest.ServerURL(), "--broker", "mem://",
		"--cloudevents-source", "urn:shop:orders", "--cloudevents-prefix", "ce.")
	require.ErrorContains(t, err, `relay: Config.CloudEvents.Prefix "ce." is no CloudEvents binding's`)
}
