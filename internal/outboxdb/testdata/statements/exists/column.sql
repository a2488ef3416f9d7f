-- exists/column
SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)
		AND attname = $2 AND attnum > 0 AND NOT attisdropped)
