// Package tracing turns on the export of OpenTelemetry traces from the
// standard environment variables, in the entoutbox command and in the
// services that emit and consume events: one call at start-up.
//
//	stop, err := tracing.FromEnv(ctx, "billing") // the service name when OTEL_SERVICE_NAME is unset
//	if err != nil {
//		return err
//	}
//	defer stop(context.Background()) // sends the spans not yet sent
//
// It reads what every OpenTelemetry SDK reads:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  where to send (setting one turns traces on)
//	OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  http/protobuf (default) or grpc
//	OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, ...      as the OTLP exporters read them
//	OTEL_TRACES_EXPORTER                                            otlp, console (spans on standard output) or none
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES                       what the spans say they come from
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG                      default parentbased_always_on
//	OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE, ...            the batching of the export
//	OTEL_SDK_DISABLED=true                                          off, whatever else is set
//
// Traces are off while none of OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and OTEL_TRACES_EXPORTER is set (or
// when OTEL_TRACES_EXPORTER is none): FromEnv then changes nothing, and
// the library's spans cost a nil check. When on, FromEnv sets the global
// tracer provider, which the relay and the consumers use unless given
// one, and the global propagator to W3C trace context and baggage, which
// carry the trace in the events' headers from Emit through the relay to
// the handler.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Requested tells whether the environment asks for traces (see the
// package doc).
func Requested() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if e := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); e != "" {
		return e != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv exports traces as the environment says, when it asks for them
// (Requested), as serviceName unless OTEL_SERVICE_NAME names the service:
// it sets the global tracer provider and propagator. stop sends the spans
// not yet sent and stops the export; call it when the process ends, with
// a context that bounds the wait. When traces are off, stop does nothing.
// An error is a setting FromEnv cannot follow (an unknown exporter or
// protocol, a malformed OTEL_RESOURCE_ATTRIBUTES).
func FromEnv(ctx context.Context, serviceName string) (stop func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	if !Requested() {
		return off, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return off, nil
	}
	// Later options win: the environment's service name over serviceName.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(serviceName)), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: the resource from OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}
