// Package relay moves committed outbox rows (written by the generated Emit
// methods, through package outbox) to a Watermill broker:
//
//	b, err := broker.Open(ctx, "nats://127.0.0.1:4222", broker.Options{})
//	...
//	r, err := relay.New(relay.Config{DB: db, Publisher: b.Publisher()})
//	...
//	err = r.Run(ctx) // until ctx ends
//
// Config.TopicPrefix is prepended to every topic on the broker; consumers
// must subscribe with the same prefix (consumer.WithTopicPrefix), or they
// receive nothing. Config.Fast.Lease bounds how long a relay that is
// paused or cut off from the database keeps its partitions; one that dies
// is taken over within seconds, through its liveness lock, unless
// Fast.PollOnly.
//
// The read paths live in packages of their own under relay/internal, each
// fed its settings by this package and knowing nothing of it: fastpath
// (PathFast, the default: claims by partition, LISTEN/NOTIFY, one message
// in flight per aggregate), walpath (PathWAL: logical replication) and
// compatpath (PathCompatible: the stock watermill-sql subscriber and
// Watermill's forwarder, behind SchemaAdapter). relay.go picks one; the
// files named for a path (fast_*, wal_*, compat_*) hold its public
// settings and the code that runs it. The fast and WAL paths are sources
// that only hand rows out and take outcomes back; the engine (package
// engine) publishes them, decides every failure by its one failure
// policy, and turns every path's rows into messages. Subscriber
// (fast_subscriber.go) is the fast source as a Watermill Subscriber.
//
// Next to every path, and in Subscriber, a promoter (package schedule,
// started in promote.go) moves the scheduled events (events.DeliverAt,
// events.DeliverAfter) into the outbox when they are due by the
// database's clock; the path then delivers them like any row.
package relay
