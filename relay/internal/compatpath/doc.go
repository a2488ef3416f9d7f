// Package compatpath is the relay's compatible read path: the stock
// watermill-sql subscriber, with this package's schema and offsets
// adapters, feeding Watermill's components/forwarder unchanged (run.go).
// The schema adapter (adapter.go) rebuilds the forwarder's envelope from
// the row's columns, with the message every read path builds of a row
// (engine's Row.Message), so the row itself stays queryable JSONB. A row no
// broker can take is set aside to the dead letters in the subscriber's own
// transaction.
//
// On PostgreSQL the adapters read in commit order after the consumer
// group's offset (adapter.go, run.go); on MySQL, where ids do not follow
// commits, from the first undelivered row under the group's lock
// (mysql.go).
//
// It knows nothing of package relay: the relay hands it its Settings, and
// the relay's public SchemaAdapter is a thin wrapper of this one.
package compatpath
