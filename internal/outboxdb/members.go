package outboxdb

// The members of a consumer group reading a topic by partition: each
// instance's subscription keeps a row alive (a lease it renews) and reads
// the partitions that its rank among the live rows gives it. Nothing
// depends on the rows for correctness (the number check keeps each
// aggregate in order wherever its events go): a row that outlives its
// instance only leaves that instance's partitions unread until its lease
// ends.

import "github.com/entoutbox/entoutbox/internal/pgsql"

// ConsumerMembers holds the live members, one row per consumer name, topic
// and member; named after the positions table.
func (t Tables) ConsumerMembers() string { return t.Positions + "_members" }

// CreateMembersQuery creates the members table when it is missing; the
// consumers make it themselves, as the relay makes its lease tables.
func (t Tables) CreateMembersQuery() string { return t.cached(orderCreateMembers) }

var orderCreateMembers = define("order/create-members", func(t Tables) string {
	return `CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.ConsumerMembers()) + ` (
			consumer text NOT NULL,
			topic text NOT NULL,
			member text NOT NULL,
			until timestamptz NOT NULL,
			PRIMARY KEY (consumer, topic, member))`
})

// BeatQuery renews member $3's lease of consumer $1 on topic $2 for $4
// milliseconds, removes the members whose lease ended, and returns the
// other live members. (The returned rows are read before the statement's
// own writes: the caller adds itself.)
func (t Tables) BeatQuery() string { return t.cached(orderBeat) }

var orderBeat = define("order/beat", func(t Tables) string {
	m := pgsql.QuoteIdent(t.ConsumerMembers())
	return `WITH beat AS (
			INSERT INTO ` + m + ` (consumer, topic, member, until)
			VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
			ON CONFLICT (consumer, topic, member) DO UPDATE SET until = EXCLUDED.until
		), gone AS (
			DELETE FROM ` + m + ` WHERE consumer = $1 AND topic = $2 AND member <> $3 AND until < now()
		)
		SELECT member FROM ` + m + ` WHERE consumer = $1 AND topic = $2 AND member <> $3 AND until >= now()`
})

// LeaveQuery ends member $3's membership of consumer $1 on topic $2.
func (t Tables) LeaveQuery() string { return t.cached(orderLeave) }

var orderLeave = define("order/leave", func(t Tables) string {
	return `DELETE FROM ` + pgsql.QuoteIdent(t.ConsumerMembers()) + ` WHERE consumer = $1 AND topic = $2 AND member = $3`
})
