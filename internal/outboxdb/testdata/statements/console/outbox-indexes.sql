-- console/outbox-indexes
SELECT i.relname, array_to_string(array_agg(a.attname ORDER BY k.ord), ',')
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
		WHERE x.indrelid = to_regclass($1) AND x.indisvalid AND x.indpred IS NULL
		GROUP BY i.relname ORDER BY i.relname
