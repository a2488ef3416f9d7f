-- failing/rows-wal-leases-logged
WITH failing AS MATERIALIZED (
			SELECT topic, aggregate_type, aggregate_id, last_error FROM (
				SELECT * FROM ((SELECT o.id, o.topic, o.aggregate_type, o.aggregate_id, o.last_error FROM "outbox_events" o WHERE o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM "outbox_events_wal_progress" wp WHERE wp.created IS NOT NULL AND wp.delivered IS NOT NULL AND o.delivered_at IS NULL AND o.transaction_id >= pg_snapshot_xmin(wp.created) AND o.transaction_id < pg_snapshot_xmax(wp.delivered) AND pg_visible_in_snapshot(o.transaction_id, wp.delivered) AND NOT pg_visible_in_snapshot(o.transaction_id, wp.created)) AND NOT (EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id) OR coalesce(o.id <= (SELECT df.upto FROM "outbox_events_delivered_to" df) AND pg_visible_in_snapshot(o.transaction_id, (SELECT df.snap FROM "outbox_events_delivered_to" df)), false)) AND o.id > coalesce((SELECT df.upto FROM "outbox_events_delivered_to" df), 0) ORDER BY o.id LIMIT $1)
			UNION ALL (SELECT * FROM (SELECT o.id, o.topic, o.aggregate_type, o.aggregate_id, o.last_error FROM "outbox_events" o WHERE o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM "outbox_events_wal_progress" wp WHERE wp.created IS NOT NULL AND wp.delivered IS NOT NULL AND o.delivered_at IS NULL AND o.transaction_id >= pg_snapshot_xmin(wp.created) AND o.transaction_id < pg_snapshot_xmax(wp.delivered) AND pg_visible_in_snapshot(o.transaction_id, wp.delivered) AND NOT pg_visible_in_snapshot(o.transaction_id, wp.created)) AND NOT (EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id) OR coalesce(o.id <= (SELECT df.upto FROM "outbox_events_delivered_to" df) AND pg_visible_in_snapshot(o.transaction_id, (SELECT df.snap FROM "outbox_events_delivered_to" df)), false)) AND o.transaction_id >= pg_snapshot_xmin((SELECT df.snap FROM "outbox_events_delivered_to" df)) AND o.transaction_id < pg_snapshot_xmax((SELECT df.snap FROM "outbox_events_delivered_to" df)) AND o.id <= coalesce((SELECT df.upto FROM "outbox_events_delivered_to" df), 0) OFFSET 0) b ORDER BY b.id LIMIT $1)
			UNION ALL (SELECT * FROM (SELECT o.id, o.topic, o.aggregate_type, o.aggregate_id, o.last_error FROM "outbox_events" o WHERE o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM "outbox_events_wal_progress" wp WHERE wp.created IS NOT NULL AND wp.delivered IS NOT NULL AND o.delivered_at IS NULL AND o.transaction_id >= pg_snapshot_xmin(wp.created) AND o.transaction_id < pg_snapshot_xmax(wp.delivered) AND pg_visible_in_snapshot(o.transaction_id, wp.delivered) AND NOT pg_visible_in_snapshot(o.transaction_id, wp.created)) AND NOT (EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id) OR coalesce(o.id <= (SELECT df.upto FROM "outbox_events_delivered_to" df) AND pg_visible_in_snapshot(o.transaction_id, (SELECT df.snap FROM "outbox_events_delivered_to" df)), false)) AND o.transaction_id IS NULL AND o.id <= coalesce((SELECT df.upto FROM "outbox_events_delivered_to" df), 0) OFFSET 0) b ORDER BY b.id LIMIT $1)) p ORDER BY id LIMIT $1) o
			WHERE last_error IS NOT NULL
		), holders AS (
			SELECT * FROM (SELECT relay, topic, partition, count(*) OVER (PARTITION BY topic) AS n FROM "outbox_events_partitions") h WHERE relay <> ''
		), owned AS (
			SELECT '' AS relay, f.topic, f.last_error FROM failing f
			UNION ALL
			SELECT h.relay, h.topic, f.last_error FROM failing f
			JOIN holders h ON (h.topic = f.topic OR h.topic = '') AND h.partition = abs(hashtext(f.aggregate_type || ':' || f.aggregate_id) % h.n)::int
		), exact AS (
			SELECT relay, topic, last_error, count(*) AS n FROM owned GROUP BY relay, topic, last_error
		), grouped AS (
			SELECT relay, topic, regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(left(last_error, 1000), '"(?:[^"\\]|\\.)*"', '"…"', 'g'), '(?<![[:alnum:]])''(?:[^''\\]|\\.)*''', '''…''', 'g'), '`[^`]*`', '`…`', 'g'), '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'), '0x[0-9a-fA-F]+', '<id>', 'g'), '(?<![[:alnum:]])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])', '<id>', 'g'), '(?<![[:alnum:]])(?=[[:alnum:]]*[0-9])(?=[[:alnum:]]*[[:alpha:]])[[:alnum:]]{16,}(?![[:alnum:]])', '<id>', 'g'), '(?<![[:alnum:]])[0-9]+(?:\.[0-9]+)?', '<n>', 'g') AS pattern, sum(n)::bigint AS n,
				min(last_error) AS example
			FROM exact GROUP BY 1, 2, 3
		), ranked AS (
			SELECT *, row_number() OVER (PARTITION BY relay, topic ORDER BY n DESC, pattern) AS rk,
				sum(n) OVER (PARTITION BY relay, topic)::bigint AS total
			FROM grouped
		)
		SELECT relay, topic, total, example, n FROM ranked WHERE rk = 1 ORDER BY relay, topic LIMIT $2
