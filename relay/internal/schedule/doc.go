// Package schedule moves the scheduled events (events.DeliverAt,
// events.DeliverAfter) into the outbox when they are due, by the
// database's clock: a Promoter runs next to whichever read path the relay
// runs, and the read paths deliver a promoted event like any row, never
// before it is due (it is not in the outbox before).
//
// Files: promoter.go (the loop: promote what is due, read when the next
// is due, wait that long or until a notification), listen.go (the LISTEN
// connection on the scheduled table's channel). The SQL is
// outboxdb.Tables.PromoteQuery and NextDue.
//
// It knows nothing of package relay: the relay hands it its Settings.
package schedule
