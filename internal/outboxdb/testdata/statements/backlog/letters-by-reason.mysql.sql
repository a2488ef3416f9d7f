-- backlog/letters-by-reason
WITH letters AS (
			SELECT id, source, reason FROM `outbox_dead_letters` WHERE retried_at IS NULL AND discarded_at IS NULL ORDER BY id DESC LIMIT ?1
		), exact AS (
			SELECT source, reason, COUNT(*) AS n, MAX(id) AS newest FROM letters GROUP BY source, reason
		), patterns AS (
			SELECT source, REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(LEFT(reason, 1000), '"(?:[^"\\\\]|\\\\.)*"', '"…"'), '(?<![[:alnum:]])''(?:[^''\\\\]|\\\\.)*''', '''…'''), '`[^`]*`', '`…`'), '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>'), '0x[0-9a-fA-F]+', '<id>'), '(?<![[:alnum:]])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])', '<id>'), '(?<![[:alnum:]])(?=[[:alnum:]]*[0-9])(?=[[:alnum:]]*[[:alpha:]])[[:alnum:]]{16,}(?![[:alnum:]])', '<id>'), '(?<![[:alnum:]])[0-9]+(?:\\.[0-9]+)?', '<n>') AS pattern, n, newest, reason FROM exact
		), numbered AS (
			SELECT source, pattern, n, reason,
				ROW_NUMBER() OVER (PARTITION BY source, pattern ORDER BY newest DESC) AS newest_first
			FROM patterns
		), grouped AS (
			SELECT source, pattern, CAST(SUM(n) AS SIGNED) AS n, MAX(CASE WHEN newest_first = 1 THEN reason END) AS example
			FROM numbered GROUP BY source, pattern
		), ranked AS (
			SELECT source, pattern, n, example, ROW_NUMBER() OVER (PARTITION BY source ORDER BY n DESC, pattern) AS rk
			FROM grouped
		), sources AS (
			SELECT source, CAST(SUM(n) AS SIGNED) AS n, COUNT(*) AS patterns FROM grouped
			GROUP BY source ORDER BY source <> 'relay', source LIMIT ?2
		)
		SELECT * FROM (
			SELECT s.source, 0 AS rk, '' AS pattern, '' AS example, s.n, s.patterns FROM sources s
			UNION ALL
			SELECT r.source, r.rk, r.pattern, r.example, r.n, 0 FROM ranked r JOIN sources s ON s.source = r.source
			WHERE r.rk <= ?3
		) u ORDER BY source <> 'relay', source, rk
