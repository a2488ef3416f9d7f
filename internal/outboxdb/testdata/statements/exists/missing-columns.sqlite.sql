-- exists/missing-columns
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1), COALESCE((
			SELECT group_concat(c.value, ', ') FROM json_each('["' || replace(?2, ',', '","') || '"]') c
			WHERE c.value NOT IN (SELECT name FROM pragma_table_info(?1))), '')
