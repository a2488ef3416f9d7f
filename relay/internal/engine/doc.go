// Package engine is what every row a relay's read path hands out goes
// through: it publishes the row's message (many in flight, and the
// broker-health rule that tells an outage from a message's own failure),
// decides what becomes of a failure (the failure policy, one pure function
// for every path), and takes the outcome back to the path.
//
// A read path, a source, only hands rows out (as Deliveries) and carries
// out their outcomes: the fast path's subscriptions (package fastpath) and
// the WAL path's sessions (package walpath). The compatible path (package
// compatpath) is Watermill's own forwarder; it shares the row's message
// (Row.Message), the decision for a malformed row (Malformed) and the
// dead-letter log (DeadLettered).
//
// It knows nothing of package relay: the relay hands it its settings.
package engine
