// Package schema holds the ent schemas of entoutbox's tables. Embed them in
// your own ent schema package so ent generates their clients next to yours:
//
//	type Outbox struct{ schema.Outbox }
//	type ProcessedEvent struct{ schema.ProcessedEvent }
//	type DeadLetter struct{ schema.DeadLetter }
//	type AggregateSequence struct{ schema.AggregateSequence }
//	type ConsumerPosition struct{ schema.ConsumerPosition }
//	type ScheduledEvent struct{ schema.ScheduledEvent }
//
// The type names must stay Outbox, ProcessedEvent and DeadLetter: the
// generated code hangs its methods on *OutboxClient and friends.
package schema
