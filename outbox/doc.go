// Package outbox is what generated Emit methods need at run time: the
// event, the per-transaction batch that holds a transaction's events until
// commit, and the INSERT (with its NOTIFY) that writes them as outbox rows.
// It is glue for generated code: applications call the generated
// tx.Outbox.Emit<Event> methods, not this package.
//
// A producer binary imports it and not the relay: writing events carries
// neither the relay's read paths nor the brokers.
//
// Its errors start with "outbox: ", except the events package's own
// (events.ErrDuplicateEventID, *events.ValidationError), which start with
// "events: " and name the event.
package outbox
