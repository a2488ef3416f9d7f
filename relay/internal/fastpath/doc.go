// Package fastpath is the relay's fast read path, its default: a Source
// claims committed rows in batches from the partitions its subscriptions
// own, hands them out many at a time but at most one per aggregate until
// that one is settled, wakes up on LISTEN/NOTIFY with polling as the
// fallback, and records deliveries in batches. The relay's engine (package
// engine) publishes what it hands out; the relay's public Subscriber hands
// it to a Watermill consumer.
//
// Files: source.go and subscription.go (the run loop of a subscription,
// one named step per turn), store.go and claim.go (the SQL: the claim as a
// pure function with golden files in testdata/claim), rebalance.go (the
// partitions' ownership), queues.go and partitions.go (the books, no I/O),
// liveness.go (the liveness locks), claimconns.go, notify.go and shared.go
// (the connections the Subscribers of a database share), seams.go (what
// the relay's tests reach).
//
// It knows nothing of package relay: the relay hands it its Settings.
package fastpath
