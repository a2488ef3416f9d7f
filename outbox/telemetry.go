package outbox

import (
	"context"
	"maps"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/metrics"
)

// emitMetrics is what SetMetrics set: nil, the default, counts nothing.
var emitMetrics atomic.Pointer[metrics.Metrics]

// SetMetrics makes every Emit of this process count its events in m's
// entoutbox_emit_events_total once their transaction commits; nil, the
// default, turns it off. It is process-wide because Emit runs on any ent
// client and transaction: call it once at start-up, next to the relay's
// and consumers' metrics. Batches made before the call are not counted.
func SetMetrics(m *metrics.Metrics) { emitMetrics.Store(m) }

// contextHeaders adds to h what ctx tells of the event's origin, leaving
// every header the caller set alone: the trace context of the span ctx
// carries (with otel.GetTextMapPropagator(), nothing while it is the
// no-op default), and the causation and correlation ids of the event a
// handler given ctx is handling (events.WithCause). h is not modified: a
// copy is returned when something is added.
func contextHeaders(ctx context.Context, h map[string]string) map[string]string {
	cause, caused := events.CauseFrom(ctx)
	traced := trace.SpanContextFromContext(ctx).IsValid()
	if !caused && !traced {
		return h
	}
	out := maps.Clone(h)
	if out == nil {
		out = map[string]string{}
	}
	set := func(k, v string) {
		if _, ok := h[k]; !ok && v != "" {
			out[k] = v
		}
	}
	if caused {
		causation, correlation := events.CauseHeaders(cause)
		set(events.HeaderCausationID, causation)
		set(events.HeaderCorrelationID, correlation)
	}
	if traced {
		carrier := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, carrier)
		for k, v := range carrier {
			set(k, v)
		}
	}
	return out
}
