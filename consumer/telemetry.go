package consumer

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/internal/tracing"
)

// metricsUnknownEvent is the event label of a message whose event no
// declaration names: labels stay bounded whatever arrives.
const metricsUnknownEvent = "unknown"

// startProcess starts the consumer span of one delivery of msg, a child of
// the span whose context the message's metadata carries (the relay's send
// span).
func startProcess(ctx context.Context, tracer trace.Tracer, consumer, destination string, msg *message.Message) (context.Context, trace.Span) {
	parent := otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(msg.Metadata))
	name := "process"
	if destination != "" {
		name += " " + destination
	}
	return tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		tracing.AttrSystem.String("watermill"),
		tracing.AttrDestination.String(destination),
		tracing.AttrMessageID.String(msg.UUID),
		tracing.AttrConsumerGroup.String(consumer),
		tracing.AttrOperationName.String("process"),
		tracing.AttrOperationType.String("process"),
		tracing.AttrMessageBodySize.Int(len(msg.Payload)),
	))
}

// endProcess ends the span of a delivery that returned err (to be
// retried by the broker) or was set aside for deadLettered.
func endProcess(span trace.Span, err error, deadLettered string) {
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case deadLettered != "":
		span.SetStatus(codes.Error, "dead-lettered: "+deadLettered)
	}
	span.End()
}
