package relay

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/tracing"
	"github.com/entoutbox/entoutbox/metrics"
)

// What the relay reports: metrics (Config.Metrics, nil = off) and a
// producer span per publish (Config.TracerProvider; nothing while tracing
// is off). Both cost a nil check per message when off.

// metricsKey carries the relay's *metrics.Metrics to its fast Subscriber's
// subscriptions, on the context they run with: a Subscriber used on its
// own reports nothing.
type metricsKey struct{}

func withMetrics(ctx context.Context, m *metrics.Metrics) context.Context {
	if m == nil {
		return ctx
	}
	return context.WithValue(ctx, metricsKey{}, m)
}

func metricsFrom(ctx context.Context) *metrics.Metrics {
	m, _ := ctx.Value(metricsKey{}).(*metrics.Metrics)
	return m
}

// createdAt is when the event of msg was written, zero if it does not say.
func createdAt(md message.Metadata) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, md.Get(events.MetaCreatedAt))
	return t
}

// messagingSystem is the messaging.system attribute of the send spans.
func (r *Relay) messagingSystem() string {
	if r.cfg.MessagingSystem != "" {
		return r.cfg.MessagingSystem
	}
	if s, ok := r.cfg.Publisher.(interface{ Scheme() string }); ok {
		return s.Scheme()
	}
	return "watermill"
}

// startSend starts the producer span of publishing out to topic, as a
// child of the span the event was emitted in (its headers carry it), and
// puts the span's own context in out's metadata for the consumer's span.
func startSend(tracer trace.Tracer, system, topic string, out *message.Message) trace.Span {
	prop := otel.GetTextMapPropagator()
	carrier := propagation.MapCarrier(out.Metadata)
	ctx := prop.Extract(context.Background(), carrier)
	ctx, span := tracer.Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			tracing.AttrSystem.String(system),
			tracing.AttrDestination.String(topic),
			tracing.AttrMessageID.String(out.UUID),
			tracing.AttrOperationName.String("send"),
			tracing.AttrOperationType.String("send"),
			tracing.AttrMessageBodySize.Int(len(out.Payload)),
		))
	prop.Inject(ctx, carrier)
	return span
}

// endSpan ends span with the outcome of the publish.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
