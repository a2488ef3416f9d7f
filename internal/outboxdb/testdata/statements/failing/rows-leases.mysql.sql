-- failing/rows-leases
WITH failing AS (
			SELECT topic, aggregate_type, aggregate_id, last_error FROM (
				SELECT o.topic, o.aggregate_type, o.aggregate_id, o.last_error FROM `outbox_events` o
				WHERE o.delivered_at IS NULL ORDER BY o.id LIMIT ?1) o
			WHERE last_error IS NOT NULL
		), holders AS (
			SELECT holder AS relay, id AS part, (SELECT COUNT(*) FROM `outbox_events_relay_lease`) AS n FROM `outbox_events_relay_lease` WHERE holder <> ''
		), owned AS (
			SELECT '' AS relay, f.topic, f.last_error FROM failing f
			UNION ALL
			SELECT h.relay, '', f.last_error FROM failing f JOIN holders h
			ON h.part = CRC32(CONCAT(COALESCE(aggregate_type, ''), CHAR(31), COALESCE(aggregate_id, ''))) % h.n
		), exact AS (
			SELECT relay, topic, last_error, COUNT(*) AS n FROM owned GROUP BY relay, topic, last_error
		), grouped AS (
			SELECT relay, topic, REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(LEFT(last_error, 1000), '"(?:[^"\\\\]|\\\\.)*"', '"…"'), '(?<![[:alnum:]])''(?:[^''\\\\]|\\\\.)*''', '''…'''), '`[^`]*`', '`…`'), '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>'), '0x[0-9a-fA-F]+', '<id>'), '(?<![[:alnum:]])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])', '<id>'), '(?<![[:alnum:]])(?=[[:alnum:]]*[0-9])(?=[[:alnum:]]*[[:alpha:]])[[:alnum:]]{16,}(?![[:alnum:]])', '<id>'), '(?<![[:alnum:]])[0-9]+(?:\\.[0-9]+)?', '<n>') AS pattern, CAST(SUM(n) AS SIGNED) AS n,
				MIN(last_error) AS example
			FROM exact GROUP BY relay, topic, pattern
		), ranked AS (
			SELECT relay, topic, pattern, n, example,
				ROW_NUMBER() OVER (PARTITION BY relay, topic ORDER BY n DESC, pattern) AS rk,
				CAST(SUM(n) OVER (PARTITION BY relay, topic) AS SIGNED) AS total
			FROM grouped
		)
		SELECT relay, topic, total, example, n FROM ranked WHERE rk = 1 ORDER BY relay, topic LIMIT ?2
