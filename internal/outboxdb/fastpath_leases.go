package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The fast path's statements besides the claim: the leases of the
// partitions and the memberships of the relays (<table>_partitions,
// <table>_relays), and the recording of deliveries and failures. The
// relay renders them once (FastPathSQL) and runs them inside its
// ownership lock's transaction.

var (
	fastCreateLeases = define("fastpath/create-leases", func(t Tables) string {
		return `CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.Partitions()) + ` (
	topic text NOT NULL, -- '' for the subscriptions to every topic
	partition int NOT NULL,
	relay text NOT NULL DEFAULT '', -- '' while nobody owns it
	until timestamptz NOT NULL DEFAULT '-infinity',
	PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.Relays()) + ` (
	topic text NOT NULL,
	relay text NOT NULL,
	until timestamptz NOT NULL,
	PRIMARY KEY (topic, relay));
-- Members that hold a liveness lock (see liveness): the others
-- (relays of earlier versions) are only ever taken over by lease.
ALTER TABLE ` + pgsql.QuoteIdent(t.Relays()) + ` ADD COLUMN IF NOT EXISTS live_lock boolean NOT NULL DEFAULT false`
	})
	// Acks commit without waiting for the WAL flush: after a database
	// crash the relay at worst delivers again what it had recorded in the
	// last moments, which at-least-once allows. set_config makes this one
	// statement's transaction asynchronous.
	fastDelivered = define("fastpath/delivered", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET delivered_at = now()
	FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	})
	fastDeliveredDelete = define("fastpath/delivered-delete", func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Outbox) + `
	USING (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	})
	fastFailed = define("fastpath/failed", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET attempts = attempts + $2,
	available_at = now() + $3 * interval '1 millisecond', last_error = $4 WHERE id = $1`
	})
	fastCountPartitions = define("fastpath/count-partitions", func(t Tables) string {
		return `SELECT count(*) FROM ` + pgsql.QuoteIdent(t.Partitions()) + ` WHERE topic = $1`
	})
	fastAddPartitions = define("fastpath/add-partitions", func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.Partitions()) + ` (topic, partition)
	SELECT $1, g FROM generate_series(0, $2 - 1) g`
	})
	fastJoin = define("fastpath/join", func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.Relays()) + ` (topic, relay, until, live_lock)
	VALUES ($1, $2, now() + $3 * interval '1 millisecond', $4)
	ON CONFLICT (topic, relay) DO UPDATE SET until = excluded.until, live_lock = excluded.live_lock
	RETURNING xmax = 0`
	})
	fastDropExpired = define("fastpath/drop-expired", func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Relays()) + ` WHERE topic = $1 AND until < now()`
	})
	fastDeadMembers = define("fastpath/dead-members", func(t Tables) string {
		return `SELECT relay FROM ` + pgsql.QuoteIdent(t.Relays()) + ` WHERE topic = $1 AND relay <> $2 AND live_lock
	AND NOT ` + LiveHeld(t.Outbox, "relay")
	})
	fastFreePartitions = define("fastpath/free-partitions", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Partitions()) + ` SET relay = '', until = '-infinity'
	WHERE topic = $1 AND relay = ANY($2)`
	})
	fastEndMemberships = define("fastpath/end-memberships", func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Relays()) + ` WHERE topic = $1 AND relay = ANY($2)`
	})
	fastRelease = define("fastpath/release", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Partitions()) + ` SET relay = '', until = '-infinity'
	WHERE topic = $1 AND relay = $2 AND partition = ANY($3)`
	})
	fastRenew = define("fastpath/renew", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Partitions()) + ` SET until = now() + $3 * interval '1 millisecond'
	WHERE topic = $1 AND relay = $2 RETURNING partition`
	})
	fastCountMembers = define("fastpath/count-members", func(t Tables) string {
		return `SELECT count(*) FROM ` + pgsql.QuoteIdent(t.Relays()) + ` WHERE topic = $1`
	})
	fastTakeFree = define("fastpath/take-free", func(t Tables) string {
		p := pgsql.QuoteIdent(t.Partitions())
		return `UPDATE ` + p + ` SET relay = $2, until = now() + $3 * interval '1 millisecond'
	WHERE topic = $1 AND partition IN (SELECT partition FROM ` + p + `
		WHERE topic = $1 AND (relay = '' OR until < now()) ORDER BY partition LIMIT $4)
	RETURNING partition`
	})
	fastHolders = define("fastpath/holders", func(t Tables) string {
		return `SELECT p.relay, count(*), max(p.until), ` + LiveHeld(t.Outbox, "p.relay") + `
	FROM ` + pgsql.QuoteIdent(t.Partitions()) + ` p WHERE p.topic = $1 AND p.relay NOT IN ('', $2) GROUP BY p.relay ORDER BY p.relay`
	})
)

// FastPathSQL is the text of the fast path's statements besides the claim,
// for one outbox table. Their parameters are in each statement's golden
// file.
type FastPathSQL struct {
	// CreateLeases creates the leases' and the memberships' tables.
	CreateLeases string
	// Delivered marks rows $1 delivered; DeliveredDelete deletes them
	// instead. Failed records a failed delivery of row $1: $2 more
	// attempts, tried again in $3 ms, for reason $4.
	Delivered, DeliveredDelete, Failed string
	// Topic $1's partitions: counted, and added ($2 of them).
	CountPartitions, AddPartitions string
	// Relay $2's membership of topic $1: renewed for $3 ms with live lock
	// $4 (returning whether it began); the expired ones ended; the members
	// other than $2 whose liveness lock is not held; counted.
	Join, DropExpired, DeadMembers, CountMembers string
	// Relays $2 (an array) of topic $1: their partitions freed, their
	// memberships ended.
	FreePartitions, EndMemberships string
	// Relay $2's partitions of topic $1: Release gives back those of
	// array $3; Renew extends its leases by $3 ms; TakeFree leases it up to
	// $4 free or expired ones for $3 ms; Holders is who holds the others.
	Release, Renew, TakeFree, Holders string
}

// FastPath renders the fast path's statements on t.
func (t Tables) FastPath() FastPathSQL {
	return FastPathSQL{
		CreateLeases: fastCreateLeases.SQL(t), Delivered: fastDelivered.SQL(t), DeliveredDelete: fastDeliveredDelete.SQL(t),
		Failed: fastFailed.SQL(t), CountPartitions: fastCountPartitions.SQL(t), AddPartitions: fastAddPartitions.SQL(t),
		Join: fastJoin.SQL(t), DropExpired: fastDropExpired.SQL(t), DeadMembers: fastDeadMembers.SQL(t),
		CountMembers: fastCountMembers.SQL(t), FreePartitions: fastFreePartitions.SQL(t),
		EndMemberships: fastEndMemberships.SQL(t), Release: fastRelease.SQL(t), Renew: fastRenew.SQL(t),
		TakeFree: fastTakeFree.SQL(t), Holders: fastHolders.SQL(t),
	}
}
