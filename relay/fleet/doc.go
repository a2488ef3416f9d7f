// Package fleet runs one relay per tenant database in one process: a
// service with a database (or a PostgreSQL schema) per tenant relays all
// of them without a relay process each.
//
// One database is one relay: the fleet calls relay.New for each tenant,
// with the settings of Config.Relay and the tenant's own pool, and runs
// it. It is a scheduler of relays, not a relay of its own: order per
// aggregate, fencing, dead letters, scheduled events and graceful
// shutdown are each relay's, so they hold per database as they do for a
// single one. Every message a tenant's relay publishes carries the tenant
// (events.MetaTenant, and the CloudEvents extension "tenant"; see
// relay.Config.Tenant).
//
// The databases come from a file the operator controls (see File): the
// fleet reads it every Config.Reload and, when its contents changed,
// starts the relays of new entries, stops those of removed ones
// (gracefully: in-flight publishes finish and are recorded) and restarts
// those whose URL or schema changed, without a restart of the process.
//
// A tenant's failure is its own: a database that is down, dropped, or
// lacks the outbox tables fails that tenant's relay alone, which is
// logged with the tenant's name, retried with a doubling wait, and shown
// by Status; the other relays go on.
//
// Connections: each tenant's pool is bounded to Config.MaxConnections
// divided among the tenants, and never below the floor a relay needs
// (see ConnectionsPerTenant). By default the relays run the fast path
// poll-only (relay.FastConfig.PollOnly): an idle tenant holds no LISTEN
// connection and no liveness session, only what its polls borrow.
//
// Idle tenants hold nothing: a tenant starts parked, and a running one
// whose relay had nothing to publish for Config.IdleAfter is parked again
// (its relay stopped gracefully, its pool closed). One prober reads the
// parked tenants' outboxes every Config.ProbeInterval, the schemas of one
// database in one statement on a connection it opens and closes, and
// starts the relay of each tenant whose outbox has work.
//
// Several processes share the tenants through Config.Members, a
// database where each records a heartbeat: each tenant is relayed by the
// live process rendezvous hashing gives it, and the tenants of a process
// that joins, leaves or goes silent move accordingly. Safety does not
// rest on that view: two processes that briefly both relay a tenant run
// two relays on its database, which share its partitions through its own
// lease table.
//
// Metrics: with Config.Metrics, each tenant's relay's metrics carry the
// label tenant (bounded by Config.MetricsTenants, the rest summed under
// OtherTenants), beside the tenants' states; WatchBacklogs adds each
// tenant's backlog (pending events, oldest age, dead letters, held
// aggregates), read every BacklogConfig.Interval on one connection per
// database URL, never served stale for a tenant that cannot be read.
//
// The package lives under relay since it only schedules relays, through
// relay's public API; the entoutbox relay command runs it with
// --databases-file.
package fleet
