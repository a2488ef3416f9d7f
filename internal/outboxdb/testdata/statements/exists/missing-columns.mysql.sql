-- exists/missing-columns
SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?1),
		COALESCE((SELECT GROUP_CONCAT(j.c ORDER BY j.n SEPARATOR ', ')
			FROM JSON_TABLE(CONCAT('["', REPLACE(?2, ',', '","'), '"]'), '$[*]' COLUMNS (n FOR ORDINALITY, c VARCHAR(64) PATH '$')) j
			WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns k
				WHERE k.table_schema = DATABASE() AND k.table_name = ?1 AND k.column_name = j.c)), '')
