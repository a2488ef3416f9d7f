package tracing_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/entoutbox/entoutbox/internal/tracing"
)

// Tracing is off, at no cost, until a provider that records is given or
// set globally; a nil provider follows the global one, even set later.
// Not parallel: it sets the global provider.
func TestTracerIsOffUntilAProviderIsSet(t *testing.T) {
	global := tracing.New(nil)
	require.Nil(t, global.Get(), "the global provider before the application set one")
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = global.Get() }))
	require.Nil(t, tracing.New(noop.NewTracerProvider()).Get())

	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(t.Context()) }()
	require.NotNil(t, tracing.New(tp).Get())

	otel.SetTracerProvider(tp)
	require.NotNil(t, global.Get(), "follows the provider set later")
	_, span := global.Get().Start(t.Context(), "x")
	require.True(t, span.SpanContext().IsValid())
	span.End()
	otel.SetTracerProvider(noop.NewTracerProvider())
	require.Nil(t, global.Get())
}
