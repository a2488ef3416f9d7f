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
// The read paths live in files named for them: fast_* (PathFast, the
// default: claims by partition, LISTEN/NOTIFY, one message in flight per
// aggregate), wal_* (PathWAL: logical replication) and compat_*
// (PathCompatible: the stock watermill-sql subscriber and Watermill's
// forwarder over SchemaAdapter). relay.go picks one. The fast and WAL paths
// are sources that only hand rows out and take outcomes back; the engine
// (engine.go, publish.go) publishes them and decides every failure by the
// one failure policy (policy.go). rows.go is what every path does with a
// row; Subscriber (fast_subscriber.go) is the fast source as a Watermill
// Subscriber.
package relay
