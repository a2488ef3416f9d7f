-- failing/rows
WITH failing AS (
			SELECT topic, last_error FROM (
				SELECT o.topic, o.last_error FROM `outbox_events` o
				WHERE o.delivered_at IS NULL ORDER BY o.id LIMIT ?1) o
			WHERE last_error IS NOT NULL
		), exact AS (
			SELECT topic, last_error, COUNT(*) AS n FROM failing GROUP BY topic, last_error
		), grouped AS (
			SELECT topic, REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(LEFT(last_error, 1000), '"(?:[^"\\\\]|\\\\.)*"', '"…"'), '(?<![[:alnum:]])''(?:[^''\\\\]|\\\\.)*''', '''…'''), '`[^`]*`', '`…`'), '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>'), '0x[0-9a-fA-F]+', '<id>'), '(?<![[:alnum:]])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])', '<id>'), '(?<![[:alnum:]])(?=[[:alnum:]]*[0-9])(?=[[:alnum:]]*[[:alpha:]])[[:alnum:]]{16,}(?![[:alnum:]])', '<id>'), '(?<![[:alnum:]])[0-9]+(?:\\.[0-9]+)?', '<n>') AS pattern, CAST(SUM(n) AS SIGNED) AS n,
				MIN(last_error) AS example
			FROM exact GROUP BY topic, pattern
		), ranked AS (
			SELECT topic, pattern, n, example, ROW_NUMBER() OVER (PARTITION BY topic ORDER BY n DESC, pattern) AS rk,
				CAST(SUM(n) OVER (PARTITION BY topic) AS SIGNED) AS total
			FROM grouped
		)
		SELECT '' AS relay, topic, total, example, n FROM ranked WHERE rk = 1 ORDER BY topic LIMIT ?2
