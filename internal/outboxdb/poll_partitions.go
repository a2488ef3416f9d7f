package outboxdb

// The poll path's partitions, on MySQL: several relays share the outbox
// there, each relaying the rows of the partitions it leases. A row's
// partition is a hash of its aggregate (type and id), so that an
// aggregate's rows are relayed by one relay at a time, in their order.
// The lease table (PollLease) holds a row per partition: its holder and
// until when; a free partition has no holder and an until in the past.
// The members table holds each live relay and until when it is live: a
// relay leases its share of the partitions, the count of partitions over
// the count of live members.
//
// The lease table is small, so its writes scan it: they run under READ
// COMMITTED, where InnoDB neither waits for nor keeps the lock of a row
// that does not match (semi-consistent reads), and relays renewing and
// taking at once do not deadlock.

// PollMembers is the table of the relays that share the outbox on MySQL.
func (t Tables) PollMembers() string { return t.Outbox + "_relay_members" }

// mysqlFree is the until of a partition no relay holds.
const mysqlFree = `'1970-01-01 00:00:01'`

// mysqlPartition is the partition of the row in the FROM clause, out of ?3
// partitions.
const mysqlPartition = `CRC32(CONCAT(COALESCE(aggregate_type, ''), CHAR(31), COALESCE(aggregate_id, ''))) % ?3`

var (
	// PollPartitionsSeed adds the partitions ?1 (a JSON array of numbers)
	// to the lease table, free; those there already stay as they are.
	PollPartitionsSeed = defineOnly("poll/partitions-seed", MySQL, func(t Tables) string {
		return `INSERT IGNORE INTO ` + MySQL.quote(t.PollLease()) + ` (id, holder, ` + "`until`" + `)
		SELECT d.id, '', ` + mysqlFree + ` FROM (` + mysqlIDs("?1") + `) d`
	})
	// PollMembersCreate creates the members table.
	PollMembersCreate = defineOnly("poll/members-create", MySQL, func(t Tables) string {
		return `CREATE TABLE IF NOT EXISTS ` + MySQL.quote(t.PollMembers()) + ` (
		holder VARCHAR(255) PRIMARY KEY, ` + "`until`" + ` DATETIME(6) NOT NULL)`
	})
	// PollMemberBeat says relay ?1 is live for ?2 more milliseconds.
	PollMemberBeat = defineOnly("poll/member-beat", MySQL, func(t Tables) string {
		return `INSERT INTO ` + MySQL.quote(t.PollMembers()) + ` (holder, ` + "`until`" + `)
		VALUES (?1, ` + mysqlNow + ` + INTERVAL ?2 * 1000 MICROSECOND)
		ON DUPLICATE KEY UPDATE ` + "`until`" + ` = VALUES(` + "`until`" + `)`
	})
	// PollMembersLive counts the live relays.
	PollMembersLive = defineOnly("poll/members-live", MySQL, func(t Tables) string {
		return `SELECT COUNT(*) FROM ` + MySQL.quote(t.PollMembers()) + ` WHERE ` + "`until`" + ` > ` + mysqlNow
	})
	// PollMemberLeave takes relay ?1 out of the members, and the members
	// dead for a day (each run of a relay is a member of its own).
	PollMemberLeave = defineOnly("poll/member-leave", MySQL, func(t Tables) string {
		return `DELETE FROM ` + MySQL.quote(t.PollMembers()) + ` WHERE holder = ?1 OR ` + "`until`" + ` < ` + mysqlNow + ` - INTERVAL 1 DAY`
	})
	// PollPartitionsRenew renews the partitions relay ?1 holds for ?2
	// milliseconds from now: those it held, whether or not their lease ran
	// out, as long as no other relay took them.
	PollPartitionsRenew = defineOnly("poll/partitions-renew", MySQL, func(t Tables) string {
		return `UPDATE ` + MySQL.quote(t.PollLease()) + ` SET ` + "`until`" + ` = ` + mysqlNow + ` + INTERVAL ?2 * 1000 MICROSECOND
		WHERE holder = ?1`
	})
	// PollPartitionsHeld reads the partitions relay ?1 holds.
	PollPartitionsHeld = defineOnly("poll/partitions-held", MySQL, func(t Tables) string {
		return `SELECT id FROM ` + MySQL.quote(t.PollLease()) + ` WHERE holder = ?1 ORDER BY id`
	})
	// PollPartitionsFree locks up to ?1 partitions whose lease ran out or
	// that are free, passing over those another relay is taking (SKIP
	// LOCKED): relays that take at once take different ones, and none
	// waits for another.
	PollPartitionsFree = defineOnly("poll/partitions-free", MySQL, func(t Tables) string {
		return `SELECT id FROM ` + MySQL.quote(t.PollLease()) + ` WHERE ` + "`until`" + ` < ` + mysqlNow + `
		ORDER BY id LIMIT ?1 FOR UPDATE SKIP LOCKED`
	})
	// PollPartitionsTake leases the partitions ?1 (a comma-separated list,
	// locked by PollPartitionsFree) to relay ?2 for ?3 milliseconds.
	PollPartitionsTake = defineOnly("poll/partitions-take", MySQL, func(t Tables) string {
		return `UPDATE ` + MySQL.quote(t.PollLease()) + ` SET holder = ?2, ` + "`until`" + ` = ` + mysqlNow + ` + INTERVAL ?3 * 1000 MICROSECOND
		WHERE FIND_IN_SET(id, ?1)`
	})
	// PollPartitionsGive frees the partitions ?2 (a comma-separated list)
	// that relay ?1 holds.
	PollPartitionsGive = defineOnly("poll/partitions-give", MySQL, func(t Tables) string {
		return `UPDATE ` + MySQL.quote(t.PollLease()) + ` SET ` + "`until`" + ` = ` + mysqlFree + `, holder = ''
		WHERE holder = ?1 AND FIND_IN_SET(id, ?2)`
	})
	// PollPartitionsGiveAll frees every partition relay ?1 holds.
	PollPartitionsGiveAll = defineOnly("poll/partitions-give-all", MySQL, func(t Tables) string {
		return `UPDATE ` + MySQL.quote(t.PollLease()) + ` SET ` + "`until`" + ` = ` + mysqlFree + `, holder = '' WHERE holder = ?1`
	})
	// PollPendingIn is PollPending of the rows in the partitions ?4 (a
	// comma-separated list) of ?3.
	PollPendingIn = defineOnly("poll/pending-in", MySQL, func(t Tables) string {
		return mysqlPending(t, `FIND_IN_SET(`+mysqlPartition+`, ?4)`)
	})
)
