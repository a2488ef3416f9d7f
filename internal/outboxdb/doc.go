// Package outboxdb is the one owner of the SQL of the outbox's own tables:
// their names, whether they exist, what "delivered" means on each read
// path, and the bounded reads of the backlog, the fast relays' shares and
// the WAL relays' slots, and the move of a row to the dead letters. The
// relay, metrics, admin and the console read through it, so that a
// question about the tables has one answer.
//
// It is laid out like river's driver layer (riverdriver): a small
// Querier every read takes and an Execer every write takes (a *sql.DB, a
// *sql.Tx, or an ent client or transaction), named reads returning plain
// structs, and no state of its own. The read paths' own statements
// (claims, leases, progress snapshots) are rendered here once and run by
// the paths, on their own connections; the dead-letter move and an
// operator's repairs (package admin: retry, discard, purge) write through
// it.
//
//   - tables.go: Tables, every table name derived from the outbox table's.
//   - exists.go: whether a table or column exists, and the check that a
//     table is an outbox table.
//   - delivered.go: each path's delivered predicate, the WAL path's
//     included, and the deletion of the rows the WAL path delivered.
//   - backlog.go: the pending rows and the dead letters, counted up to a
//     bound.
//   - reasons.go: a dead letter's reason with its ids and numbers
//     replaced, which the summary groups by.
//   - failing.go: the pending rows whose last publish failed, by topic
//     and by the fast relay holding their partition.
//   - letters.go: the dead letters an operator lists, retries, discards
//     and purges (package admin), and an event's letters.
//   - rows.go: an event's outbox row, and the delivered rows a replay
//     reads, each delivered by whichever path did.
//   - scheduled.go: the scheduled events waiting, overdue and cancelled,
//     counted up to a bound, and an event's scheduled row.
//   - promote.go: the due scheduled events moved into the outbox in one
//     statement, one promotion at a time, and when the next is due.
//   - consumers.go: the aggregates consumers hold behind a dead letter.
//   - relays.go: the fast relays' shares of the partitions, and their
//     liveness locks.
//   - wal_slots.go: the WAL relays' replication slots (PostgreSQL only).
//   - move.go: a row moved to the dead letters in one statement, and
//     the letter of a row gone from the table, from what a path carried.
//   - emit_insert.go: the emit path's INSERT of events into the outbox,
//     numbered or not, and a duplicate's number given back.
//   - emit_schedule.go: the INSERT of events scheduled for later, and
//     their cancel.
//   - console_reads.go: the console's overview and event page reads.
//   - console_search.go: the console's search of the outbox (EventFilter)
//     and the id range and indexes that plan it.
//   - lag_read.go: the consumers' lag: counted, then located in the outbox.
//   - letters_consumer.go: a consumer's dead letter, once per event.
//   - outboxtest_wait.go: where a test harness's events stand.
//   - fastpath_claim.go: the fast path's claim, a statement per shape.
//   - fastpath_leases.go: the fast path's leases, memberships, deliveries
//     and failures (Tables.FastPath).
//   - wal_relay.go: the WAL relay's progress rows, the rows before its
//     slot's start, its publication and slot reads (PostgreSQL only).
//   - compatpath.go: the compatible path's select and ack stamp.
//   - retention.go: the cleanups' batched delete of old rows.
//   - metrics_held.go: the held aggregates counted by consumer.
//   - order.go, positions.go, members.go: the consumers' statements on
//     their positions, dedupe records and group members, rendered once
//     per Tables (they run per event).
//   - settle.go: a consumer's position settled after a repair.
//   - numbering.go: the trigger that numbers rows inserted without Emit.
//   - topics.go: the topics of the newest rows.
//   - statements.go: Statement, the named statements.
//
// Every statement is a Statement named "area/what", rendered for the
// default table names into testdata/statements/<area>/<what>.sql; a
// statement built from variable pieces (a filter, a path's delivered
// predicate, a table of an earlier version) is defined once per shape.
//
// # A second database
//
// A second database implements the named statements for its dialect, each
// a function of Tables as here, and the functions that run them, which
// take the database/sql shaped Querier and Execer and return plain
// structs: no pgx type crosses this package's interface. What is
// PostgreSQL's alone has no counterpart to write: the WAL path
// (wal_relay.go, wal_slots.go, and the snapshot predicates of
// delivered.go), and LISTEN, which lives in internal/listen (the
// statements' pg_notify calls go with it).
package outboxdb
