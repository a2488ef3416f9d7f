-- backlog/letters-by-reason
WITH open AS MATERIALIZED (
			SELECT id, source, reason FROM "outbox_dead_letters" WHERE retried_at IS NULL AND discarded_at IS NULL ORDER BY id DESC LIMIT $1
		), exact AS (
			SELECT source, reason, count(*) AS n, max(id) AS newest FROM open GROUP BY source, reason
		), patterns AS (
			SELECT source, regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(left(reason, 1000), '"(?:[^"\\]|\\.)*"', '"…"', 'g'), '(?<![[:alnum:]])''(?:[^''\\]|\\.)*''', '''…''', 'g'), '`[^`]*`', '`…`', 'g'), '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'), '0x[0-9a-fA-F]+', '<id>', 'g'), '(?<![[:alnum:]])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])', '<id>', 'g'), '(?<![[:alnum:]])(?=[[:alnum:]]*[0-9])(?=[[:alnum:]]*[[:alpha:]])[[:alnum:]]{16,}(?![[:alnum:]])', '<id>', 'g'), '(?<![[:alnum:]])[0-9]+(?:\.[0-9]+)?', '<n>', 'g') AS pattern, n, newest, reason FROM exact
		), grouped AS (
			SELECT source, pattern, sum(n)::bigint AS n, (array_agg(reason ORDER BY newest DESC))[1] AS example
			FROM patterns GROUP BY source, pattern
		), ranked AS (
			SELECT *, row_number() OVER (PARTITION BY source ORDER BY n DESC, pattern) AS rk FROM grouped
		), sources AS (
			SELECT source, sum(n)::bigint AS n, count(*) AS patterns FROM grouped
			GROUP BY source ORDER BY source <> 'relay', source LIMIT $2
		)
		SELECT * FROM (
			SELECT s.source, 0::bigint AS rk, '' AS pattern, '' AS example, s.n, s.patterns FROM sources s
			UNION ALL
			SELECT r.source, r.rk, r.pattern, r.example, r.n, 0 FROM ranked r JOIN sources USING (source) WHERE r.rk <= $3
		) u ORDER BY source <> 'relay', source, rk
