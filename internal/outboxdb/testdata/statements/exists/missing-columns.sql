-- exists/missing-columns
SELECT to_regclass($1) IS NOT NULL, array_to_string(ARRAY(
			SELECT c FROM unnest(string_to_array($2, ',')) c WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
				WHERE a.attrelid = to_regclass($1) AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped)), ', ')
