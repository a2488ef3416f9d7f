package events

import "context"

// Headers that tie an event to the one whose handling emitted it. Emit sets
// them from the context a consumer's handler is given (see WithCause); a
// header given to Emit wins.
const (
	// HeaderCausationID is the id of the event whose handler emitted this
	// one.
	HeaderCausationID = "causation_id"
	// HeaderCorrelationID is shared by every event of one chain: the
	// causing event's correlation_id, else the causing event's id.
	HeaderCorrelationID = "correlation_id"
)

type causeKey struct{}

// WithCause returns ctx carrying m, the event being handled: events
// emitted with it carry causation and correlation headers. The consumer
// runtime calls it on the context it gives a handler.
func WithCause(ctx context.Context, m Meta) context.Context {
	return context.WithValue(ctx, causeKey{}, &m)
}

// CauseFrom returns the event ctx is handling, if any (see WithCause).
func CauseFrom(ctx context.Context) (Meta, bool) {
	m, ok := ctx.Value(causeKey{}).(*Meta)
	if !ok {
		return Meta{}, false
	}
	return *m, true
}

// CauseHeaders returns the causation and correlation headers of an event
// caused by m.
func CauseHeaders(m Meta) (causationID, correlationID string) {
	causationID = m.EventID.String()
	correlationID = m.Headers[HeaderCorrelationID]
	if correlationID == "" {
		correlationID = causationID
	}
	return causationID, correlationID
}
