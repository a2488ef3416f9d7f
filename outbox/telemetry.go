package outbox

import (
	"context"
	"maps"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/events"
)

// EmitCounter counts the events emitted, by name, once their transaction
// committed. The metrics package's *Metrics is one (its
// entoutbox_emit_events_total): an interface, so that a producer does not
// carry Prometheus unless it asks for it.
type EmitCounter interface {
	Emitted(event string, n int)
}

// emitCounter holds what SetMetrics set: no counter, the default, counts
// nothing.
var emitCounter atomic.Pointer[emitCounterBox]

// emitCounterBox lets an interface value sit in an atomic.Pointer.
type emitCounterBox struct{ EmitCounter }

// SetMetrics makes every Emit of this process count its events in m (a
// *metrics.Metrics: its entoutbox_emit_events_total) once their
// transaction commits; nil, the default, turns it off. It is process-wide
// because Emit runs on any ent client and transaction: call it once at
// start-up, next to the relay's and consumers' metrics. Batches made
// before the call are not counted.
func SetMetrics(m EmitCounter) {
	if m == nil {
		emitCounter.Store(nil)
		return
	}
	emitCounter.Store(&emitCounterBox{m})
}

// loadEmitCounter is what SetMetrics set; nil when nothing is.
func loadEmitCounter() EmitCounter {
	if b := emitCounter.Load(); b != nil {
		return b.EmitCounter
	}
	return nil
}

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
