// Package tracing holds what the relay and the consumers share of
// OpenTelemetry: a tracer that costs nothing while no provider is set, and
// the span attributes they set.
package tracing

import (
	"go.opentelemetry.io/otel"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName names the instrumentation scope of every span entoutbox starts.
const ScopeName = "github.com/entoutbox/entoutbox"

// untouchedGlobal is the global provider before the application set one:
// a no-op that only forwards to the provider set later.
var untouchedGlobal = otel.GetTracerProvider()

// Tracer gives the tracer of a provider, or of the global provider when
// none is given, and nil while tracing is off (a no-op provider, or the
// global provider while the application has set none): callers then skip
// the spans, the propagation and their allocations.
type Tracer struct {
	global bool
	tracer trace.Tracer
}

// New returns the Tracer of tp; nil tp follows the global provider, even
// one set later (the global provider's tracers forward to it).
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return &Tracer{global: true, tracer: otel.GetTracerProvider().Tracer(ScopeName)}
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return &Tracer{}
	}
	return &Tracer{tracer: tp.Tracer(ScopeName)}
}

// Get returns the tracer to use now, or nil when tracing is off.
func (t *Tracer) Get() trace.Tracer {
	if t == nil {
		return nil
	}
	if t.global {
		// Compared with a pointer: never panics, whatever was set.
		tp := otel.GetTracerProvider()
		if tp == untouchedGlobal {
			return nil
		}
		if _, ok := tp.(noop.TracerProvider); ok {
			return nil
		}
	}
	return t.tracer
}

// Attribute keys of the OpenTelemetry messaging semantic conventions.
const (
	AttrSystem          = semconv.MessagingSystemKey
	AttrDestination     = semconv.MessagingDestinationNameKey
	AttrMessageID       = semconv.MessagingMessageIDKey
	AttrOperationName   = semconv.MessagingOperationNameKey
	AttrOperationType   = semconv.MessagingOperationTypeKey
	AttrConsumerGroup   = semconv.MessagingConsumerGroupNameKey
	AttrMessageBodySize = semconv.MessagingMessageBodySizeKey
)
