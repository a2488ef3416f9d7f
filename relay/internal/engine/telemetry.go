package engine

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
)

// What the relay reports of each publish: its metrics (nil = off) and a
// producer span (nothing while tracing is off). Both cost a nil check per
// message when off.

// CreatedAt is when the event of msg was written, zero if it does not say.
func CreatedAt(md message.Metadata) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, md.Get(events.MetaCreatedAt))
	return t
}

// DeliverAt is when the scheduled event of msg was due (the header the
// relay wrote when it moved the event to the outbox), zero for an event
// that was not scheduled.
func DeliverAt(md message.Metadata) time.Time {
	at := md.Get(events.MetaDeliverAt)
	if at == "" {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, at)
	return t
}

// StartSend starts the producer span of publishing out to topic, as a
// child of the span the event was emitted in (its headers carry it), and
// puts the span's own context in out's metadata for the consumer's span.
func StartSend(tracer trace.Tracer, system, topic string, out *message.Message) trace.Span {
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

// EndSpan ends span with the outcome of the publish.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
