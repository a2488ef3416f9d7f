package tracing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/entoutbox/entoutbox/tracing"
)

// otelVars are the variables the tests set; each test starts with all of
// them unset.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_RESOURCE_ATTRIBUTES"}

func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// Traces are on when an OTLP endpoint or an exporter is named, and off
// otherwise, with the exporter none, or with the SDK disabled.
func TestRequested(t *testing.T) {
	const endpoint = "http://collector:4318"
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true},
	} {
		setEnv(t, c.env)
		require.Equal(t, c.want, tracing.Requested(), "%v", c.env)
	}
}

// While traces are off, FromEnv leaves the global provider and propagator
// alone, and its stop does nothing.
func TestFromEnvChangesNothingWhileOff(t *testing.T) {
	provider, propagator := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	for _, env := range []map[string]string{
		nil,
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"},
	} {
		setEnv(t, env)
		stop, err := tracing.FromEnv(context.Background(), "test")
		require.NoError(t, err, "%v", env)
		require.NoError(t, stop(context.Background()))
		require.True(t, otel.GetTracerProvider() == provider, "%v: the global provider was replaced", env)
		require.True(t, otel.GetTextMapPropagator() == propagator, "%v: the global propagator was replaced", env)
	}
}

// A setting FromEnv cannot follow is an error, not traces silently lost.
func TestFromEnvRefusesWhatItCannotFollow(t *testing.T) {
	provider := otel.GetTracerProvider()
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_TRACES_EXPORTER": "console", "OTEL_RESOURCE_ATTRIBUTES": "no-equals-sign"},
	} {
		setEnv(t, env)
		_, err := tracing.FromEnv(context.Background(), "test")
		require.Error(t, err, "%v", env)
		require.True(t, otel.GetTracerProvider() == provider, "%v: the global provider was replaced", env)
	}
}
