package outboxdb

import (
	"strconv"
	"strings"
)

// The reads of entoutbox status, the console's overview and the backlog
// gauges on MySQL (MySQL 8, MariaDB 10.6+): the pending rows and their
// last errors, the dead letters by source and reason, the held
// aggregates, the scheduled events and the consumers' lag. MySQL has no
// partial index: the pending rows are found by walking the primary key
// from its start past the delivered rows kept, as the poll relay finds
// them. The fast and WAL paths are PostgreSQL's: on MySQL there are no
// fast relays' shares nor replication slots to read.

// param is the n-th parameter as d's statements write it: $n on
// PostgreSQL, ?n elsewhere (bound for MySQL by Bind).
func (d Dialect) param(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?" + strconv.Itoa(n)
}

// mysqlExists is the condition that the table named by parameter n
// exists in the current database.
func mysqlExists(n int) string {
	return `EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?` +
		strconv.Itoa(n) + `)`
}

// mysqlLiteral is s as a MySQL string literal: its backslashes are
// escapes there (unless the session's sql_mode has NO_BACKSLASH_ESCAPES,
// which package mysqldb does not set).
func mysqlLiteral(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `''`) + "'"
}

// mysqlReasonPattern is ReasonPattern on MySQL: its REGEXP_REPLACE
// replaces every match, and reads the lookarounds and [[:alnum:]] (PCRE
// on MariaDB, ICU on MySQL 8).
func mysqlReasonPattern(expr string) string {
	e := "LEFT(" + expr + ", " + strconv.Itoa(maxReasonLength) + ")"
	for _, p := range reasonPatterns {
		e = "REGEXP_REPLACE(" + e + ", " + mysqlLiteral(p.re) + ", " + mysqlLiteral(p.with) + ")"
	}
	return e
}

func init() {
	q := MySQL.quote
	// The WAL path is PostgreSQL's: never a progress table to look for.
	backlogNow.also(MySQL, func(Tables) string { return `SELECT UTC_TIMESTAMP(6), FALSE` })
	backlogPending.also(MySQL, func(t Tables) string {
		return `SELECT topic, COUNT(*), MIN(created_at) FROM (
			SELECT o.topic, o.created_at FROM ` + q(t.Outbox) + ` o WHERE o.delivered_at IS NULL
			ORDER BY o.id LIMIT ?1) o
		GROUP BY topic ORDER BY topic`
	})
	backlogOpenLetters.also(MySQL, func(t Tables) string { return openLetters(t, true) })
	backlogOpenLettersUnsettled.also(MySQL, func(t Tables) string { return openLetters(t, false) })
	backlogLetterCounts.also(MySQL, func(t Tables) string { return letterCounts(t, true) })
	backlogLetterCountsUnsettled.also(MySQL, func(t Tables) string { return letterCounts(t, false) })
	backlogLettersByReason.also(MySQL, func(t Tables) string { return mysqlLettersByReason(t, true) })
	backlogLettersByReasonUnsettled.also(MySQL, func(t Tables) string { return mysqlLettersByReason(t, false) })
	existsColumn.also(MySQL, func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ?1 AND column_name = ?2)`
	})
	failingShapes[failingShape{}].also(MySQL, mysqlFailingRows)
	heldRead.also(MySQL, func(t Tables) string {
		return `SELECT consumer, n, topic, aggregate_type, aggregate_id, held_seq, COALESCE(held_event_id, ''), since
		FROM (SELECT p.consumer, COUNT(*) OVER (PARTITION BY p.consumer) AS n, p.topic, p.aggregate_type,
				p.aggregate_id, p.held_seq, p.held_event_id, COALESCE(p.held_at, p.updated_at) AS since, p.id,
				ROW_NUMBER() OVER (PARTITION BY p.consumer ORDER BY COALESCE(p.held_at, p.updated_at), p.id) AS rk
			FROM ` + q(t.Positions) + ` p WHERE p.held_seq IS NOT NULL) h
		WHERE rk <= ?1 ORDER BY consumer, since, id`
	})
	heldCounts.also(MySQL, func(t Tables) string {
		return `SELECT consumer, COUNT(*) FROM (SELECT consumer FROM ` + q(t.Positions) +
			` WHERE held_seq IS NOT NULL LIMIT ?1) h GROUP BY consumer`
	})
	scheduledNow.also(MySQL, func(Tables) string { return `SELECT UTC_TIMESTAMP(6), ` + mysqlExists(1) })
	scheduledWaiting.also(MySQL, func(t Tables) string {
		return `SELECT topic, COUNT(*), CAST(SUM(deliver_at <= ?2) AS SIGNED), MIN(deliver_at)
		FROM (SELECT topic, deliver_at FROM ` + q(t.Scheduled) + `
			WHERE cancelled_at IS NULL ORDER BY deliver_at, id LIMIT ?1) s
		GROUP BY topic ORDER BY MIN(deliver_at), topic`
	})
	scheduledCancelled.also(MySQL, func(t Tables) string {
		return `SELECT COUNT(*) FROM (SELECT 1 FROM ` + q(t.Scheduled) + `
		WHERE cancelled_at IS NOT NULL LIMIT ?1) c`
	})
}

// mysqlLettersByReason is lettersByReason on MySQL: the example of a
// pattern is its newest reason, picked by a row number (MySQL has no
// array_agg). Each step is read once, so that MySQL, which computes a
// step again for each reference to it, makes each pattern once: the rows
// of the sources and of their reasons come from one ranking, the source's
// own row of its first reason (own), the sources kept by their rank (src).
func mysqlLettersByReason(t Tables, settled bool) string {
	open := ""
	if settled {
		open = " WHERE " + letterState[LetterOpen]
	}
	return `WITH letters AS (
			SELECT id, source, reason FROM ` + MySQL.quote(t.DeadLetters) + open + ` ORDER BY id DESC LIMIT ?1
		), exact AS (
			SELECT source, reason, COUNT(*) AS n, MAX(id) AS newest FROM letters GROUP BY source, reason
		), patterns AS (
			SELECT source, ` + mysqlReasonPattern("reason") + ` AS pattern, n, newest, reason FROM exact
		), numbered AS (
			SELECT source, pattern, n, reason,
				ROW_NUMBER() OVER (PARTITION BY source, pattern ORDER BY newest DESC) AS newest_first
			FROM patterns
		), grouped AS (
			SELECT source, pattern, CAST(SUM(n) AS SIGNED) AS n, MAX(CASE WHEN newest_first = 1 THEN reason END) AS example
			FROM numbered GROUP BY source, pattern
		), ranked AS (
			SELECT source, pattern, n, example,
				ROW_NUMBER() OVER (PARTITION BY source ORDER BY n DESC, pattern) AS rk,
				CAST(SUM(n) OVER (PARTITION BY source) AS SIGNED) AS total,
				COUNT(*) OVER (PARTITION BY source) AS patterns,
				DENSE_RANK() OVER (ORDER BY source <> 'relay', source) AS src
			FROM grouped
		)
		SELECT r.source, IF(k.own, 0, r.rk) AS place, IF(k.own, '', r.pattern), IF(k.own, '', r.example),
			IF(k.own, r.total, r.n), IF(k.own, r.patterns, 0)
		FROM ranked r JOIN (SELECT TRUE AS own UNION ALL SELECT FALSE) k ON IF(k.own, r.rk = 1, r.rk <= ?3)
		WHERE r.src <= ?2
		ORDER BY r.src, place`
}

// mysqlFailingRows is failingRows on MySQL, where no fast relay holds
// partitions: the first ?1 pending rows' last errors by topic, ?2 topics
// at most.
func mysqlFailingRows(t Tables) string {
	return `WITH failing AS (
			SELECT topic, last_error FROM (
				SELECT o.topic, o.last_error FROM ` + MySQL.quote(t.Outbox) + ` o
				WHERE o.delivered_at IS NULL ORDER BY o.id LIMIT ?1) o
			WHERE last_error IS NOT NULL
		), exact AS (
			SELECT topic, last_error, COUNT(*) AS n FROM failing GROUP BY topic, last_error
		), grouped AS (
			SELECT topic, ` + mysqlReasonPattern("last_error") + ` AS pattern, CAST(SUM(n) AS SIGNED) AS n,
				MIN(last_error) AS example
			FROM exact GROUP BY topic, pattern
		), ranked AS (
			SELECT topic, pattern, n, example, ROW_NUMBER() OVER (PARTITION BY topic ORDER BY n DESC, pattern) AS rk,
				CAST(SUM(n) OVER (PARTITION BY topic) AS SIGNED) AS total
			FROM grouped
		)
		SELECT '' AS relay, topic, total, example, n FROM ranked WHERE rk = 1 ORDER BY topic LIMIT ?2`
}

// The consumers' lag on MySQL (internal/lag), as on PostgreSQL: the
// counters less the positions, then a walk back from the newest row. The
// consumers and topics behind come as one JSON array of [consumer, topic]
// pairs (?3): MySQL has no arrays.
func init() {
	q := MySQL.quote
	LagTables.also(MySQL, func(Tables) string {
		return `SELECT UTC_TIMESTAMP(6), ` + mysqlExists(1) + ` AND ` + mysqlExists(2)
	})
	LagCount.also(MySQL, func(t Tables) string {
		return `WITH numbered AS (
			SELECT topic, SUM(last_seq) AS n FROM ` + q(t.Sequences) + ` GROUP BY topic
		), applied AS (
			SELECT consumer, topic, SUM(last_seq) AS n FROM ` + q(t.Positions) + ` GROUP BY consumer, topic
		)
		SELECT a.consumer, a.topic, CAST(GREATEST(s.n - a.n, 0) AS SIGNED)
		FROM applied a JOIN numbered s ON s.topic = a.topic ORDER BY a.consumer, a.topic`
	})
	LagWalkBounds.also(MySQL, func(t Tables) string {
		return `SELECT COALESCE(MIN(id), 0), COUNT(*) FROM (SELECT id FROM ` + q(t.Outbox) +
			` WHERE id < ?1 ORDER BY id DESC LIMIT ?2) w`
	})
	LagLocate.also(MySQL, func(t Tables) string {
		return `SELECT c.consumer, c.topic, COUNT(*), MIN(o.created_at)
		FROM ` + q(t.Outbox) + ` o JOIN JSON_TABLE(?3, '$[*]' COLUMNS (
			consumer VARCHAR(191) PATH '$[0]', topic VARCHAR(191) PATH '$[1]')) c ON c.topic = o.topic
		WHERE o.id >= ?1 AND o.id < ?2 AND o.aggregate_seq > COALESCE((SELECT p.last_seq FROM ` + q(t.Positions) + ` p
			WHERE p.consumer = c.consumer AND p.topic = o.topic AND p.aggregate_type = o.aggregate_type
			AND p.aggregate_id = o.aggregate_id), 0)
		GROUP BY c.consumer, c.topic`
	})
}

// The console's overview on MySQL: the delivery rate (a range of the
// primary key, or every ?3-th id of it, one lookup each) and the
// consumers (MySQL reads the distinct names by a loose index scan of its
// own).
func init() {
	q := MySQL.quote
	ConsoleMaxID.also(MySQL, func(t Tables) string { return `SELECT MAX(id) FROM ` + q(t.Outbox) })
	ConsoleIDRange.also(MySQL, func(t Tables) string { return `SELECT MIN(id), MAX(id) FROM ` + q(t.Outbox) })
	ConsoleFirstIDFrom.also(MySQL, func(t Tables) string {
		return `SELECT id, created_at FROM ` + q(t.Outbox) + ` WHERE id >= ?1 ORDER BY id LIMIT 1`
	})
	bucket := `CAST(FLOOR(TIMESTAMPDIFF(MICROSECOND, delivered_at, ` + mysqlNow + `) / 1000000 / ?4) AS SIGNED)`
	ConsoleDeliveryRate.also(MySQL, func(t Tables) string {
		return `SELECT ` + bucket + ` AS b, COUNT(*)
		FROM ` + q(t.Outbox) + ` WHERE id BETWEEN ?1 AND ?2 AND ?3 = 1
			AND delivered_at > ` + mysqlNow + ` - INTERVAL ?5 SECOND
		GROUP BY b`
	})
	// The ids to look up are counted out by JSON_TABLE's ordinals over an
	// array of as many zeros: no recursive CTE, whose depth MySQL 8 bounds
	// at 1000 by default.
	ConsoleDeliveryRateSampled.also(MySQL, func(t Tables) string {
		return `SELECT ` + strings.ReplaceAll(bucket, "delivered_at", "o.delivered_at") + ` AS b, COUNT(*)
		FROM JSON_TABLE(CONCAT('[', REPEAT('0,', FLOOR((?2 - ?1) / ?3)), '0]'), '$[*]' COLUMNS (k FOR ORDINALITY)) s
		JOIN ` + q(t.Outbox) + ` o ON o.id = ?1 + (s.k - 1) * ?3
		WHERE o.delivered_at > ` + mysqlNow + ` - INTERVAL ?5 SECOND
		GROUP BY b`
	})
	ConsoleConsumers.also(MySQL, func(t Tables) string {
		processed := q(t.Processed)
		return `SELECT names.consumer, COALESCE(recent.n, 0), recent.last
		FROM (SELECT consumer FROM ` + processed + ` GROUP BY consumer ORDER BY consumer LIMIT 1000) names
		LEFT JOIN (SELECT consumer, COUNT(*) AS n, MAX(processed_at) AS last FROM ` + processed + `
			WHERE processed_at > ` + mysqlNow + ` - INTERVAL 1 MINUTE GROUP BY consumer) recent ON recent.consumer = names.consumer
		ORDER BY names.consumer`
	})
}

// The poll relays' shares of the outbox on MySQL (the lease table, see
// poll_partitions.go): each relay's partitions, of every topic, and until
// when it holds them. A relay there beats in the members table rather
// than holding a liveness lock: Locks and Live are false.
func init() {
	q := MySQL.quote
	relaysPartitions.also(MySQL, func(t Tables) string { return `SELECT COUNT(*) FROM ` + q(t.PollLease()) })
	relaysShares.also(MySQL, func(t Tables) string {
		return `SELECT holder, '', COUNT(*), MAX(` + "`until`" + `), MAX(` + "`until`" + `) < ` + mysqlNow + `, FALSE, FALSE
		FROM ` + q(t.PollLease()) + ` WHERE holder <> '' GROUP BY holder ORDER BY holder LIMIT ?1`
	})
	failingShapes[failingShape{leases: true}].also(MySQL, mysqlFailingRowsLeased)
}

// mysqlFailingRowsLeased is mysqlFailingRows with the rows' last errors by
// the poll relay leasing their partition too (of every topic), the partition
// computed as the poll path computes it; ?1 and ?2 as there.
func mysqlFailingRowsLeased(t Tables) string {
	leases := MySQL.quote(t.PollLease())
	return `WITH failing AS (
			SELECT topic, aggregate_type, aggregate_id, last_error FROM (
				SELECT o.topic, o.aggregate_type, o.aggregate_id, o.last_error FROM ` + MySQL.quote(t.Outbox) + ` o
				WHERE o.delivered_at IS NULL ORDER BY o.id LIMIT ?1) o
			WHERE last_error IS NOT NULL
		), holders AS (
			SELECT holder AS relay, id AS part, (SELECT COUNT(*) FROM ` + leases + `) AS n FROM ` + leases + ` WHERE holder <> ''
		), owned AS (
			SELECT '' AS relay, f.topic, f.last_error FROM failing f
			UNION ALL
			SELECT h.relay, '', f.last_error FROM failing f JOIN holders h
			ON h.part = ` + strings.ReplaceAll(mysqlPartition, "?3", "h.n") + `
		), exact AS (
			SELECT relay, topic, last_error, COUNT(*) AS n FROM owned GROUP BY relay, topic, last_error
		), grouped AS (
			SELECT relay, topic, ` + mysqlReasonPattern("last_error") + ` AS pattern, CAST(SUM(n) AS SIGNED) AS n,
				MIN(last_error) AS example
			FROM exact GROUP BY relay, topic, pattern
		), ranked AS (
			SELECT relay, topic, pattern, n, example,
				ROW_NUMBER() OVER (PARTITION BY relay, topic ORDER BY n DESC, pattern) AS rk,
				CAST(SUM(n) OVER (PARTITION BY relay, topic) AS SIGNED) AS total
			FROM grouped
		)
		SELECT relay, topic, total, example, n FROM ranked WHERE rk = 1 ORDER BY relay, topic LIMIT ?2`
}

// An event's page in the console on MySQL: its scheduled row, and who
// processed it (the distinct consumers by MySQL's loose index scan of the
// (consumer, event_id) key, then one probe of it each).
func init() {
	q := MySQL.quote
	scheduledOfEvent.also(MySQL, func(t Tables) string {
		return `SELECT id, event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, headers, COALESCE(readable_from, 0), deliver_at, created_at, cancelled_at
		FROM ` + q(t.Scheduled) + ` WHERE event_id = ?1`
	})
	ConsoleProcessedBy.also(MySQL, func(t Tables) string {
		processed := q(t.Processed)
		return `SELECT p.consumer, p.processed_at, p.attempts
		FROM (SELECT consumer FROM ` + processed + ` GROUP BY consumer) names
		JOIN ` + processed + ` p ON p.consumer = names.consumer AND p.event_id = ?1
		ORDER BY p.processed_at`
	})
}
